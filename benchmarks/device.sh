#!/usr/bin/env bash
# GPU validation on a bare GPU machine: `bash benchmarks/device.sh PART...` (with the device tool:
# carry `.whl`, the wheels the machine lacks). Each part runs under its own time limit; full logs
# under $OUT, the lines that matter on stdout. A device call is at most 10 minutes: pick parts.
#   gpu_tests                 tests/sandbox/harness/test_harness_gpu.py: symmetric-memory candidate, races, cuda mode, compile errors
#   jail_gpu                  tests/sandbox/jail/test_jail_gpu.py: cuda devices, FileStore group and symmetric memory inside the jail
#   wire_gpu                  tests/sandbox/rank/test_wire_gpu.py, test_device_share_gpu.py: blobs staged page-locked and from pageable memory; device blobs, in a jail too
#   masking                   tests/sandbox/harness/test_reference_make_gpu.py: inputs made on a GPU masked as device and as memfd blobs
#   commitment                tests/sandbox/rank/test_commitment_gpu.py and test_input_mask_gpu.py, then benchmarks/commitment_cost.py
#                             (leaf sizes 4, 8, 16 KiB)
#   leaves                    benchmarks/commitment_cost.py at 64 MiB by tree leaf size (0.5-8 KiB), this tree's leaf kernel, then
#                             .baseline's (an older tree, carried; whole KiB only)
#   blob_memory               benchmarks/blob_memory.py: a blob's host memory (fresh memfd pages, by how they are written)
#   extension_build           benchmarks/extension_build.py --phases --kloop-only: a torch extension's cold build, nvcc's front ends
#                             at once vs plain nvcc (about 5 min)
#   reference_call            benchmarks/reference_call_noise.py: the all_reduce reference's call, timed as a rank does, in 4 processes, then 4 pinned to a CPU
#   ahead_gpu                 tests/sandbox/rank/test_rank_device_gpu.py and the cuda-mode harness test: a call timed with its launch hidden
#   layouts                   reference_call_noise.py --layouts: the same in processes of random and fixed memory layout, and fixed on each CPU
#   sync_modes                benchmarks/sync_modes.py: a rank's timed interval in fresh processes by the context's scheduling flag (SYNC_PROCESSES each)
#   staging                   benchmarks/staging.py: a call's inputs staged to the GPU, by how the blob is mapped
#   timing_noise              benchmarks/timing_noise.py: idle gaps, retained outputs, CPU placement (suspects of timing noise)
#   hostile_emulate           tests/sandbox/harness/test_hostile_gpu.py, emulate mode at worlds 2 and 4 (correctness only)
#   hostile_cuda              tests/sandbox/harness/test_hostile_gpu.py, cuda mode at world 1 (timed; run it alone on the GPU)
#   hostile_short             the same file's claims of nothing on the problem's small and latency sizes (calls of a few us), an honest copy beside
#   hostile_memfd             the same file's staging attacks and honest copies with inputs in memory files (KLOOP_INPUT_BLOBS=memfd)
#   probe                     benchmarks/gpu_probe.py: one line per case with stages and where the harness time went
#   bash_gpu                  tests/agent/bash/test_bash_gpu.py: bash mode, scripted:bash-demo-cuda in emulate (world 2) and cuda (world 1)
#   oracles_w4 / oracles_w8   every oracle in emulation, 500 back-to-back calls
#   oracles_racy              every oracle without its trailing barrier, worlds 4 and 8
#   oracles_extra             two-shot all-reduce forced at 4 and 8; several blocks a rank
#   oracle_cuda               all-reduce oracle in cuda mode, world 1: timing, roofline, profile
#   oracles_w1                benchmarks/oracles.py, world 1, default and latency sizes: each oracle's share of the roofline
#   perf                      measured topology and the performance feedback (tests/sandbox/test_gpu_perf.py)
#   latency                   benchmarks/eval_latency.py, cuda, world 1
#   latency_ab                eval_latency.py (cuda, world 1, with the profile) in .baseline, then in this tree
#   batch_oracles             kloop batch of benchmarks/batch_oracles_cuda.yaml (oracles and references, cuda, world 1) + report
#   batch_oracles_quick       the same with one sample per problem (half the time)
#   service_gpu               tests/service/test_service_gpu.py: a batch through the API in emulate (world 2) and cuda (world 1)
#   service_cuda              kloop serve on GPU 0: 40 cuda world-1 evaluations from 8 API clients (benchmarks/service_load.py)
#   service_cpu               kloop serve, 6 CPU slots: 200 CPU evaluations from 20 API clients (none lost or duplicated, p50/p99)
#   problems:CAT[,CAT]        every problem of these categories, its reference as a candidate (tests/problems/test_suite_gpu.py)
# Issue 13 (carry `.pkb` too, a ParallelKernelBench checkout):
#   extension_gpu             the torch-extension and compile-error tests of tests/sandbox/harness/test_harness_gpu.py
#   episode_gpu               tests/agent/test_session_gpu.py and tests/agent/bash/test_bash_gpu.py: episodes' evaluations through one warm harness
#   episode_evals             benchmarks/episode_evals.py: an episode's evaluations (cuda, world 1) through one warm harness vs a harness a step
#   cli_ab                    benchmarks/cli_latency.py: `kloop eval` (a fresh CLI, cuda, world 1) in .baseline (carried) and this
#                             tree, CLI_RUNS each, alternating
#   vs_pkb                    benchmarks/vs_pkb.py --server (vs_pkb_no_server: without the server's rows): PKB's run_local vs kloop eval (and through kloop serve), cold and warm, one file (about 6 min)
#   pkb_refs                  benchmarks/pkb_references.py, world 1, resumable: repeat the call until its summary shows no
#                             problem left (results kept in /tmp/pkb_refs on the warm machine, copied to $OUT each time)
#   throughput                benchmarks/throughput.py: 40 warm evaluations of all_reduce, world 1 (throughput_short: 16)
#   throughput_ab             throughput_short in .baseline (an older tree, carried), then in this tree, then the harness's cost
#                             of a timed call in each (benchmarks/clock_cost.py)
#   throughput_depth          throughput.py (24 evaluations) at each pool depth of DEPTHS (default "4 8 4 8"), interleaved
#   throughput_keep           throughput.py (KEEP_COUNT evaluations, default 24) with the reference's time alone kept for each count of KEEPS
#                             evaluations (default "1 8 1 8"; 1: measured in every one), interleaved
#   warm_eval                 benchmarks/warm_eval.py: `kloop eval --server` against a `kloop serve` on GPU 0, 8 warm runs (command to report)
#   warm_eval_ab              the same, 6 warm runs, in .baseline (an older tree, carried) then in this tree
#   stability                 benchmarks/timing_stability.py: 5 separate jobs, world 1, all_reduce symm candidate
#   warm_up_ab                throughput.py (WARM_UP_COUNT evaluations, default 24) taking the settings WARM_UPS_MS and
#                             WARMUPS in turn (defaults "2 0.5 0.5" ms and "10 10 4" calls), then stability with the
#                             warm-up STABILITY_WARM_UPS_MS (default "2 0.5") in alternate jobs
#   first_call                benchmarks/first_call.py: a symm candidate's first calls on a fresh rank, with and without torch's shape checks imported before
#   symm_steps                first_call.py --steps: a first symmetric buffer, torch call by torch call
#   symm_profile              a py-spy profile of that (carry .tools: py-spy's wheel), summed by benchmarks/stack_profile.py
#   call_profile              a py-spy profile of throughput.py (8 evaluations): where a timed call's time goes, in the rank's
#                             `call` and in the parent's timed rounds (carry .tools: py-spy's wheel; Python frames only: 0.4.3
#                             with --native segfaulted at start on an H100 host on 2026-12-07)
#   stability_long            timing_stability.py, 5 jobs each of the all_gather_gemm and gemm_reduce_scatter oracles (world 1,
#                             calls of 1 ms or more: the goal there is <= 1.03)
#   stability_ab              stability in this tree, in .baseline (an older tree, carried), in this tree, in .baseline
#                             (STABILITY_RUNS="1_new 2_baseline" for one of each)
#   stability_precision       stability's 5 jobs at each asked precision of PRECISIONS in turn (default "0.03 0.06"; timing goes
#                             on past the planned calls while the interval is wider and within reach)
#   stability_baseline        the same in .baseline (an older tree, carried)
set -uo pipefail
OUT=${OUT:-/tmp/kloop-out}
mkdir -p "$OUT"
# several device.sh may run side by side on one machine: the wheels are installed once
if [ ! -f /tmp/site/.installed ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  touch /tmp/site/.installed
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.device_count(), 'GPU(s)')"
PYTEST="python3 -m pytest -m gpu -q -s -p no:cacheprovider"
ORACLES="$PYTEST tests/problems/test_oracle_solutions_gpu.py"
stability="benchmarks/timing_stability.py --world 1 --problems all_reduce --candidate tests/fixtures/candidates/all_reduce_symm.py --repeats 5"
part() {
  local name=$1 limit=$2; shift 2
  local started=$SECONDS
  echo "=== $name"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "(exit $?, $((SECONDS - started)) s)"
  grep -E "^ORACLE|^PROBLEM|^emulate|^racy|^cuda|^world|^roofline|^measured|^reference |^candidate |^speedup|passed|failed|skipped" "$OUT/$name.log" | cut -c1-260
}
run=0
for name in "$@"; do
  case $name in
    gpu_tests) part "$name" 480 $PYTEST tests/sandbox/harness/test_harness_gpu.py ;;
    ahead_gpu) part "$name" 240 $PYTEST tests/sandbox/rank/test_rank_device_gpu.py tests/sandbox/harness/test_harness_gpu.py -k "flush or ahead or cuda_mode_times"
      grep -oE "(timed vs ahead|reference alone|flush before a timed|an 8 MiB read).*" "$OUT/$name.log" | cut -c1-600 ;;
    episode_gpu) part "$name" 380 $PYTEST tests/agent/test_session_gpu.py tests/agent/bash/test_bash_gpu.py
      grep -oE "^step [0-9]: .{0,200}|(check|bench|profile) solution.py: [A-Z]+.{0,80}" "$OUT/$name.log" | head -20 ;;
    episode_evals) part "$name" 400 python3 benchmarks/episode_evals.py --device cuda --world 1 --steps "${EPISODE_STEPS:-4}" \
        --sessions "${EPISODE_SESSIONS:-2}"
      grep -E "session [0-9]+:" "$OUT/$name.log"; sed -n '/^steps after the first/,$p' "$OUT/$name.log" ;;
    extension_gpu) part "$name" 300 $PYTEST tests/sandbox/harness/test_harness_gpu.py -k "torch_extension_path or own_module or compile_error" ;;
    cli_ab) part "$name" 240 python3 benchmarks/cli_latency.py --device cuda --world 1 --runs "${CLI_RUNS:-3}" --baseline .baseline
      sed -n '/^kloop eval/,$p' "$OUT/$name.log" ;;
    jail_gpu) part "$name" 200 $PYTEST tests/sandbox/jail/test_jail_gpu.py; grep -E "^(PASS|FAIL) " "$OUT/$name.log" | cut -c1-200 ;;
    wire_gpu) part "$name" 150 $PYTEST tests/sandbox/rank/test_wire_gpu.py tests/sandbox/rank/test_device_share_gpu.py; grep -E "^(PASS|FAIL) " "$OUT/$name.log" | cut -c1-300 ;;
    masking) part "$name" 150 $PYTEST tests/sandbox/harness/test_reference_make_gpu.py; grep -E "^reference inputs" "$OUT/$name.log" | cut -c1-400 ;;
    leaves)
      part leaves_new 120 python3 benchmarks/commitment_cost.py --mib 64 --leaf-kib 0.5 1 2 4 8
      sed -n '/^MISMATCH/p; /^commitment cost/,$p' "$OUT/leaves_new.log"
      part leaves_baseline 120 bash -c "cd .baseline && PYTHONPATH=/tmp/site:\$PWD python3 benchmarks/commitment_cost.py --mib 64 --leaf-kib 1 2 4 8"
      sed -n '/^MISMATCH/p; /^commitment cost/,$p' "$OUT/leaves_baseline.log" ;;
    warm_up_ab)
      part warm_up_throughput 300 python3 benchmarks/throughput.py --device cuda --world 1 --count "${WARM_UP_COUNT:-24}" \
        --warm-up-ms ${WARM_UPS_MS:-2 0.5 0.5} --warmup ${WARMUPS:-10 10 4} --out "$OUT/warm_up_throughput"
      sed -n '/^throughput:/,$p' "$OUT/warm_up_throughput.log"
      part warm_up_stability 300 python3 $stability --warm-up-ms ${STABILITY_WARM_UPS_MS:-2 0.5} --json "$OUT/warm_up_stability.json"
      grep -E "^all_reduce \||job [0-9]" "$OUT/warm_up_stability.log" | cut -c1-150 ;;
    commitment) part "$name" 120 $PYTEST tests/sandbox/rank/test_commitment_gpu.py tests/sandbox/rank/test_input_mask_gpu.py
      grep -E "^commitment of|^mask of" "$OUT/$name.log"
      timeout 120 python3 benchmarks/commitment_cost.py --mib 1 16 64 128 --leaf-kib 4 8 16 > "$OUT/commitment_cost.log" 2>&1
      sed -n '/^MISMATCH/p; /^commitment cost/,$p' "$OUT/commitment_cost.log" ;;
    staging) part "$name" 60 python3 benchmarks/staging.py --repeats 12; sed -n '/^staging/,$p' "$OUT/$name.log" ;;
    timing_noise) part "$name" 120 python3 benchmarks/timing_noise.py; grep -vE "^\s*$" "$OUT/$name.log" | tail -20 ;;
    blob_memory) part "$name" 90 python3 benchmarks/blob_memory.py --threads 2 4 8; sed -n '/^a blob/,$p' "$OUT/$name.log" ;;
    extension_build) part "$name" 560 python3 benchmarks/extension_build.py --phases --kloop-only; sed -n '/^cold builds/,$p' "$OUT/$name.log" ;;
    sync_modes) part "$name" 240 python3 benchmarks/sync_modes.py --processes "${SYNC_PROCESSES:-5}" --json "$OUT/sync_modes.json"
      grep -E "^process=" "$OUT/$name.log" | cut -c1-300; sed -n '/^medians over/,$p' "$OUT/$name.log" ;;
    reference_call) part "$name" 120 python3 benchmarks/reference_call_noise.py --processes 4 --pinned; sed -n '/^a rank/,$p' "$OUT/$name.log" ;;
    layouts) part "$name" 300 python3 benchmarks/reference_call_noise.py --layouts --processes "${LAYOUT_PROCESSES:-6}"
      grep -E "process [0-9]+" "$OUT/$name.log" | cut -c1-240; sed -n '/^medians of/,$p' "$OUT/$name.log" ;;
    hostile_emulate) part "$name" 540 $PYTEST tests/sandbox/harness/test_hostile_gpu.py -k test_emulate; grep -E " emulate w[0-9] " "$OUT/$name.log" | cut -c1-200 ;;
    hostile_memfd) part "$name" 240 $PYTEST tests/sandbox/harness/test_hostile_gpu.py -k memory_files; grep -E " cuda w1 |   timing check" "$OUT/$name.log" | cut -c1-400 ;;
    hostile_cuda) part "$name" 420 $PYTEST tests/sandbox/harness/test_hostile_gpu.py -k "test_cuda_world_1 and not short_calls"
      grep -E " cuda w1 |   timing check" "$OUT/$name.log" | cut -c1-700 ;;
    hostile_short) part "$name" 240 $PYTEST tests/sandbox/harness/test_hostile_gpu.py -k short_calls
      grep -E " cuda w1 |   timing check" "$OUT/$name.log" | cut -c1-700 ;;
    probe) part "$name" 90 python3 benchmarks/gpu_probe.py --json "$OUT/probe.json"; grep -vE "^\s*log|^      " "$OUT/$name.log" | cut -c1-300 ;;
    bash_gpu) part "$name" 560 $PYTEST tests/agent/bash/test_bash_gpu.py; grep -E "^--- command|: (CORRECT|WRONG)|Speedup|emulation is never" "$OUT/$name.log" | cut -c1-200 ;;
    oracles_w4) part "$name" 300 env KLOOP_ORACLE_STRESS_CALLS=500 $ORACLES -k "back_to_back and -4]" ;;
    oracles_w8) part "$name" 420 env KLOOP_ORACLE_STRESS_CALLS=500 $ORACLES -k "back_to_back and -8]" ;;
    oracles_racy) part "$name" 240 env KLOOP_ORACLE_STRESS_CALLS=100 $ORACLES -k "trailing_barrier" ;;
    oracles_extra) part "$name" 150 env KLOOP_ORACLE_STRESS_CALLS=500 $ORACLES -k "two_shot or several_blocks" ;;
    oracle_cuda) part "$name" 90 $ORACLES -k "cuda_mode" ;;
    oracles_w1) part "$name" 400 python3 benchmarks/oracles.py --world 1 --sizes default latency --json "$OUT/oracles_w1.json"
      sed -n '/^oracle vs reference/,$p' "$OUT/$name.log" ;;
    perf) part "$name" 200 $PYTEST tests/sandbox/test_gpu_perf.py ;;
    latency) part "$name" 120 python3 benchmarks/eval_latency.py --device cuda --world 1 --profile; sed -n '/^eval latency/,$p' "$OUT/latency.log" ;;
    service_gpu) part "$name" 400 $PYTEST tests/service/test_service_gpu.py ;;
    service_cuda)
      part "$name" 480 python3 benchmarks/service_load.py --start --evals 40 --clients 8 --device cuda --world 1 -- --gpus 0 --cpu-slots 2
      tail -8 "$OUT/$name.log" ;;
    service_cpu)
      part "$name" 540 python3 benchmarks/service_load.py --start --evals 200 --clients 20 -- --gpus '' --cpu-slots 6
      tail -8 "$OUT/$name.log" ;;
    latency_ab)
      latency="benchmarks/eval_latency.py --device cuda --world 1 --profile"
      part latency_baseline 150 bash -c "cd .baseline && PYTHONPATH=/tmp/site:\$PWD python3 $latency"
      sed -n '/^eval latency/,$p' "$OUT/latency_baseline.log"
      part latency_new 150 python3 $latency
      sed -n '/^eval latency/,$p' "$OUT/latency_new.log" ;;
    vs_pkb|vs_pkb_no_server) part "$name" 570 python3 benchmarks/vs_pkb.py --pkb-root .pkb $([ "$name" = vs_pkb ] && echo --server) \
        --timeout-s 280 --out "$OUT/$name"
      sed -n '/^ParallelKernelBench vs kloop/,$p' "$OUT/$name.log" ;;
    pkb_refs) part "$name" 540 python3 benchmarks/pkb_references.py --pkb-root .pkb --device cuda --world 1 --timeout-s 120 \
        --out /tmp/pkb_refs --resume
      cp -r /tmp/pkb_refs "$OUT/"; grep -E ": (correct|cannot|too|harness|skipped)" "$OUT/$name.log" | cut -c1-200
      sed -n '/^summary/,$p' "$OUT/$name.log" ;;
    throughput|throughput_short) part "$name" 480 python3 benchmarks/throughput.py --device cuda --world 1 \
      --count $([ "$name" = throughput ] && echo 40 || echo 16) --out "$OUT/throughput"
      sed -n '/^throughput:/,$p' "$OUT/$name.log" ;;
    throughput_ab)
      short="benchmarks/throughput.py --device cuda --world 1 --count 16"
      part throughput_baseline 240 bash -c "cd .baseline && PYTHONPATH=/tmp/site:\$PWD python3 $short --out $OUT/throughput_baseline"
      sed -n '/^throughput:/,$p' "$OUT/throughput_baseline.log"
      part throughput_new 240 python3 $short --out "$OUT/throughput_new"
      sed -n '/^throughput:/,$p' "$OUT/throughput_new.log"
      (cd benchmarks && python3 clock_cost.py "before=$OUT/throughput_baseline/throughput.json" "after=$OUT/throughput_new/throughput.json") ;;
    throughput_depth)
      for depth in ${DEPTHS:-4 8 4 8}; do
        run=$((run + 1))
        part "throughput_${run}_depth$depth" 200 python3 benchmarks/throughput.py --device cuda --world 1 --count 24 \
          --pool-depth "$depth" --out "$OUT/throughput_${run}_depth$depth"
        sed -n '/^throughput:/,$p' "$OUT/throughput_${run}_depth$depth.log"
      done ;;
    throughput_keep)
      for keep in ${KEEPS:-1 8 1 8}; do
        run=$((run + 1))
        part "throughput_${run}_keep$keep" 200 python3 benchmarks/throughput.py --device cuda --world 1 --count "${KEEP_COUNT:-24}" \
          --keep-alone "$keep" --out "$OUT/throughput_${run}_keep$keep"
        sed -n '/^throughput:/,$p' "$OUT/throughput_${run}_keep$keep.log"
      done ;;
    warm_eval) part "$name" 300 python3 benchmarks/warm_eval.py --device cuda --world 1 --runs 8 --json "$OUT/warm_eval.json"
      grep -E "^(first|warm [0-9]+):|   where:" "$OUT/$name.log" | head -18; sed -n '/^warm eval through/,$p' "$OUT/$name.log" ;;
    warm_eval_ab)
      warm="benchmarks/warm_eval.py --device cuda --world 1 --runs 6"
      part warm_eval_baseline 200 bash -c "cd .baseline && PYTHONPATH=/tmp/site:\$PWD python3 $warm"
      sed -n '/^warm eval through/,$p' "$OUT/warm_eval_baseline.log"
      part warm_eval_new 200 python3 $warm --json "$OUT/warm_eval.json"
      grep -E "^(first|warm [0-9]+):|   where:" "$OUT/warm_eval_new.log" | head -14; sed -n '/^warm eval through/,$p' "$OUT/warm_eval_new.log" ;;
    stability|stability_baseline)
      if [ "$name" = stability ]; then part "$name" 240 python3 $stability --json "$OUT/stability.json"
      else part "$name" 240 bash -c "cd .baseline && PYTHONPATH=/tmp/site:\$PWD python3 $stability"; fi
      grep -E "job|^timing|all_reduce \||clock:" "$OUT/$name.log" ;;
    stability_long)
      part "$name" 420 python3 benchmarks/timing_stability.py --world 1 --problems all_gather_gemm gemm_reduce_scatter --repeats 5 \
        --json "$OUT/stability_long.json"
      grep -E "job|^timing|gemm|clock:" "$OUT/$name.log" | cut -c1-260 ;;
    first_call) part "$name" 200 python3 benchmarks/first_call.py --sizes small --repeats 2; sed -n '/^a candidate/,$p' "$OUT/$name.log" ;;
    symm_steps) part "$name" 200 python3 benchmarks/first_call.py --steps --repeats 2
      sed -n '/^a process/,$p' "$OUT/$name.log" ;;
    symm_profile)
      python3 -m pip install -q --no-index --no-deps --target /tmp/tools .tools/py_spy*.whl || exit 1
      timeout 150 /tmp/tools/bin/py-spy record --subprocesses --native --format raw -r 100 -o /tmp/symm_pyspy.txt -- \
        python3 benchmarks/first_call.py --steps --repeats 1 --variants plain > "$OUT/symm_pyspy.log" 2>&1
      echo "py-spy exit $?"; grep -E "^plain [0-9]+:" "$OUT/symm_pyspy.log"
      (cd benchmarks && python3 stack_profile.py /tmp/symm_pyspy.txt --within 'empty \(torch/distributed' --top 40) \
        > "$OUT/symm_profile.log" 2>&1; cut -c1-220 "$OUT/symm_profile.log"
      gzip -c /tmp/symm_pyspy.txt > "$OUT/symm_pyspy.txt.gz" ;;
    call_profile)
      python3 -m pip install -q --no-index --no-deps --target /tmp/tools .tools/py_spy*.whl || exit 1
      timeout 240 /tmp/tools/bin/py-spy record --subprocesses --format raw -r 200 -o /tmp/call_pyspy.txt -- \
        python3 benchmarks/throughput.py --device cuda --world 1 --count 8 --out "$OUT/throughput_profiled" > "$OUT/call_pyspy.log" 2>&1
      echo "py-spy exit $?"; sed -n '/^throughput:/,$p' "$OUT/call_pyspy.log"
      (cd benchmarks && python3 stack_profile.py /tmp/call_pyspy.txt --within 'call \(.*sandbox/rank/server.py' --top 40
       python3 stack_profile.py /tmp/call_pyspy.txt --within '_timed_round_of' --top 40) > "$OUT/call_profile.log" 2>&1
      cut -c1-220 "$OUT/call_profile.log"; gzip -c /tmp/call_pyspy.txt > "$OUT/call_pyspy.txt.gz" ;;
    stability_precision) part "$name" 560 python3 $stability --timing-precision ${PRECISIONS:-0.03 0.06} --json "$OUT/$name.json"
      grep -E "^all_reduce \||job [0-9]" "$OUT/$name.log" | cut -c1-170 ;;
    stability_ab)
      for run in ${STABILITY_RUNS:-1_new 2_baseline 3_new 4_baseline}; do
        if [ "${run#*_}" = new ]; then part "stability_$run" 110 python3 $stability
        else part "stability_$run" 110 bash -c "cd .baseline && PYTHONPATH=/tmp/site:\$PWD python3 $stability"; fi
        grep -E "^all_reduce \||job [0-9]" "$OUT/stability_$run.log" | cut -c1-150
      done ;;
    batch_oracles|batch_oracles_quick)
      config=benchmarks/batch_oracles_cuda.yaml
      if [ "$name" = batch_oracles_quick ]; then config=$OUT/batch_oracles_quick.yaml; sed 's/^samples: .*/samples: 1/' benchmarks/batch_oracles_cuda.yaml > "$config"; fi
      part "$name" 540 env COLUMNS=150 python3 -m agent batch "$config" --out "$OUT/batch-oracles-cuda"
      env COLUMNS=150 python3 -m agent report "$OUT/batch-oracles-cuda" > "$OUT/batch_report.log" 2>&1; cat "$OUT/batch_report.log"
      # the run folders (every step's report: notes, clock check) as one file: too many files do not come back
      tar czf "$OUT/batch-oracles-runs.tgz" -C "$OUT/batch-oracles-cuda" runs && rm -rf "$OUT/batch-oracles-cuda/runs" ;;
    problems:*)
      ids=$(python3 -c "import sys; from problems import all_problems; cats = set(sys.argv[1].split(','));
print(' '.join(f'tests/problems/test_suite_gpu.py::test_reference_as_candidate_passes_and_a_perturbed_one_fails[{p.name}]'
               for p in all_problems() if p.spec.category in cats))" "${name#problems:}")
      part "${name//[:,]/_}" 420 $PYTEST $ids ;;
    *) echo "unknown part: $name"; exit 2 ;;
  esac
done
