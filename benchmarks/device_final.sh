#!/usr/bin/env bash
# The last device session of a lease: latency benchmark, the cold-cache fix, the oracles in
# emulation (500 back-to-back calls at world 2, racy variants, then worlds 4 and 8 as time
# allows) and cuda-mode timing. Each part under its own time limit; logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/kloop-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
PYTEST="python3 -m pytest -m gpu -q -s -p no:cacheprovider"
part() { local name=$1 limit=$2; shift 2; echo "=== $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "(exit $?)"; grep -E "^ORACLE|^emulate|^cuda|passed|failed|reference |candidate " "$OUT/$name.log" | cut -c1-230; }
part latency 90 python3 benchmarks/eval_latency.py --device cuda --world 1
tail -5 "$OUT/latency.log"
part cold_cache 40 $PYTEST tests/test_gpu.py -k "emulation and 2-small"
part oracles_w2 120 env KLOOP_ORACLE_STRESS_CALLS=500 $PYTEST tests/test_oracles_gpu.py -k "back_to_back and -2]"
part oracles_racy 90 env KLOOP_ORACLE_STRESS_CALLS=100 $PYTEST tests/test_oracles_gpu.py -k "trailing_barrier"
part oracle_cuda 45 $PYTEST tests/test_oracles_gpu.py -k "cuda_mode"
part oracles_w48 60 env KLOOP_ORACLE_STRESS_CALLS=100 $PYTEST tests/test_oracles_gpu.py -k "back_to_back and (-4] or -8])"
