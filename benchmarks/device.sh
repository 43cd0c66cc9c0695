#!/usr/bin/env bash
# GPU validation on a bare GPU machine: `bash benchmarks/device.sh PART...` (with the device tool:
# carry `.whl`, the wheels the machine lacks). Each part runs under its own time limit; full logs
# under $OUT, the lines that matter on stdout. A device call is at most 10 minutes: pick parts.
#   gpu_tests                 tests/test_gpu.py: symmetric-memory candidate, races, cuda mode, compile errors
#   bash_gpu                  tests/test_bash_gpu.py: bash mode, scripted:bash-demo-cuda in emulate (world 2) and cuda (world 1)
#   oracles_w4 / oracles_w8   every oracle in emulation, 500 back-to-back calls
#   oracles_racy              every oracle without its trailing barrier, worlds 4 and 8
#   oracles_extra             two-shot all-reduce forced at 4 and 8; several blocks a rank
#   oracle_cuda               all-reduce oracle in cuda mode, world 1: timing, roofline, profile
#   perf                      measured topology and the performance feedback (tests/test_gpu_perf.py)
#   latency                   benchmarks/eval_latency.py, cuda, world 1
#   timing_ab                 timing stability, world 1, this tree and .baseline (an older tree, carried) in turn
#   problems:CAT[,CAT]        every problem of these categories, its reference as a candidate (tests/test_problems_gpu.py)
set -uo pipefail
OUT=${OUT:-/tmp/kloop-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.device_count(), 'GPU(s)')"
PYTEST="python3 -m pytest -m gpu -q -s -p no:cacheprovider"
ORACLES="$PYTEST tests/test_oracles_gpu.py"
part() {
  local name=$1 limit=$2; shift 2
  local started=$SECONDS
  echo "=== $name"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "(exit $?, $((SECONDS - started)) s)"
  grep -E "^ORACLE|^PROBLEM|^emulate|^racy|^cuda|^world|^roofline|^measured|^reference |^candidate |^speedup|passed|failed|skipped" "$OUT/$name.log" | cut -c1-260
}
for name in "$@"; do
  case $name in
    gpu_tests) part "$name" 480 $PYTEST tests/test_gpu.py ;;
    bash_gpu) part "$name" 560 $PYTEST tests/test_bash_gpu.py; grep -E "^--- command|: (CORRECT|WRONG)|Speedup|emulation is never" "$OUT/$name.log" | cut -c1-200 ;;
    oracles_w4) part "$name" 300 env KLOOP_ORACLE_STRESS_CALLS=500 $ORACLES -k "back_to_back and -4]" ;;
    oracles_w8) part "$name" 420 env KLOOP_ORACLE_STRESS_CALLS=500 $ORACLES -k "back_to_back and -8]" ;;
    oracles_racy) part "$name" 240 env KLOOP_ORACLE_STRESS_CALLS=100 $ORACLES -k "trailing_barrier" ;;
    oracles_extra) part "$name" 150 env KLOOP_ORACLE_STRESS_CALLS=500 $ORACLES -k "two_shot or several_blocks" ;;
    oracle_cuda) part "$name" 90 $ORACLES -k "cuda_mode" ;;
    perf) part "$name" 200 $PYTEST tests/test_gpu_perf.py ;;
    latency) part "$name" 120 python3 benchmarks/eval_latency.py --device cuda --world 1; tail -6 "$OUT/latency.log" ;;
    timing_ab)
      stability="benchmarks/timing_stability.py --world 1 --problems all_reduce --repeats 3"
      part timing_baseline 80 bash -c "cd .baseline && KLOOP_CACHE_DIR=/tmp/cache-baseline PYTHONPATH=/tmp/site:\$PWD python3 $stability"
      grep -E "job|all_reduce \|" "$OUT/timing_baseline.log"
      part timing_new 80 env KLOOP_CACHE_DIR=/tmp/cache-new python3 $stability
      grep -E "job|all_reduce \|" "$OUT/timing_new.log" ;;
    problems:*)
      ids=$(python3 -c "import sys; from problems import all_problems; cats = set(sys.argv[1].split(','));
print(' '.join(f'tests/test_problems_gpu.py::test_reference_as_candidate_passes_and_a_perturbed_one_fails[{p.name}]'
               for p in all_problems() if p.spec.category in cats))" "${name#problems:}")
      part "${name//[:,]/_}" 420 $PYTEST $ids ;;
    *) echo "unknown part: $name"; exit 2 ;;
  esac
done
