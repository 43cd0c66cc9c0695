#!/usr/bin/env bash
# One session on the GPU machine: install the carried wheels (.whl), run the GPU tests, the
# latency benchmark and a scripted agent run; logs under $OUT. Usage (device tool, carry .whl):
#   bash benchmarks/device_session.sh [pytest -k expression]
set -uo pipefail
OUT=${OUT:-/tmp/kloop-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.device_count(), 'GPU(s)')"
SELECT=${1:-}
timeout 480 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_gpu.py tests/test_gpu_perf.py ${SELECT:+-k "$SELECT"} 2>&1 \
  | tee "$OUT/gpu_tests.log" | grep -E "^(emulate|racy|cuda|PROBLEM)|passed|failed|FAILED|Error" | cut -c1-220
timeout 120 python3 benchmarks/eval_latency.py --device cuda --world 1 --json "$OUT/eval_latency.json" 2>&1 | tee "$OUT/eval_latency.log" | tail -6
