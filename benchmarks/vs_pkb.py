"""ParallelKernelBench's own harness against kloop, on the same candidate file, in one run.

PKB: ``run_local.py --mode eval --trials T --measure-perf --nproc-per-node W`` (its two torchrun
jobs per trial), the file copied into a solutions folder as ``<stem>_cuda.py``. kloop: ``kloop
eval pkb:<id> FILE --world W --device cuda``. Each side runs cold (empty torch-extension cache,
empty kloop cache) and then warm (the same caches again); the table gives every wall time and
the ratios PKB / kloop (goal: warm >= 20x, cold >= 6x). With ``--server``, kloop's warm runs are
also made as a batch or the service makes them: ``kloop eval --server URL`` against a ``kloop
serve`` of this tree (its warm harness: the reference group kept, candidate groups started
ahead; its first evaluation, which starts them, is reported apart; ``--server-runs`` more, each a
new CLI process), and a warm ratio is taken against their median too.

    python benchmarks/vs_pkb.py --pkb-root .pkb --server --out /tmp/vs_pkb      # the H200 run
    python benchmarks/vs_pkb.py --pkb-root .pkb --device cpu --world 2 --allow-nccl \\
        --candidate tests/fixtures/candidates/pkb_allreduce_cuda_helpers.py --skip-pkb        # kloop's side on CPU
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from paths import ROOT
from table import print_table

GOALS = {"cold": 6.0, "warm": 20.0}


def run(command: list[str], cwd: Path, env: dict[str, str], timeout_s: float, log: Path | None) -> dict:
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
        out, err = _stop(proc)
    wall = round(time.monotonic() - started, 2)
    if log is not None:
        log.write_text(f"$ {' '.join(command)}\n(exit {code}, {wall} s)\n--- stdout\n{out}\n--- stderr\n{err}\n")
    return {"exit": code, "wall_s": wall, "stdout": out, "stderr": err}


def _stop(proc: subprocess.Popen) -> tuple[str, str]:
    """End a run that took too long: an interrupt first (kloop and run_local then end what they
    started: the harness, torchrun's workers), then a kill of its process group."""
    for sig, grace in ((signal.SIGINT, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            out, err = proc.communicate(timeout=grace)
            return _text(out), _text(err)
        except subprocess.TimeoutExpired:
            continue
    return "", ""


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def pkb_run(root: Path, candidate: Path, stem: str, args, ext_dir: Path, label: str, out: Path | None) -> dict:
    solutions = Path(tempfile.mkdtemp(prefix="pkb-solutions-"))
    try:
        shutil.copyfile(candidate, solutions / f"{stem}_cuda.py")
        env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(ext_dir)}
        if shutil.which("torchrun") is None:  # run_local.py calls `torchrun`; the module is what it runs
            launcher = solutions / "bin" / "torchrun"
            launcher.parent.mkdir()
            launcher.write_text(f"#!/bin/sh\nexec {sys.executable} -m torch.distributed.run \"$@\"\n")
            launcher.chmod(0o755)
            env["PATH"] = f"{launcher.parent}{os.pathsep}{env.get('PATH', '')}"
        command = [sys.executable, "run_local.py", "--nproc-per-node", str(args.world), "--mode", "eval", "--problem", stem,
                   "--solution", "cuda", "--solutions-dir", str(solutions), "--trials", str(args.trials), "--measure-perf"]
        result = run(command, root, env, args.timeout_s, out / f"pkb_{label}.log" if out else None)
    finally:
        shutil.rmtree(solutions, ignore_errors=True)
    text = result["stdout"]
    result["status"] = ("correct" if result["exit"] == 0 and "all trials match" in text else
                        "timeout" if result["exit"] == "timeout" else "failed")
    speedups = [line.rsplit("speedup", 1)[1].strip() for line in text.splitlines() if "| speedup" in line]
    result["detail"] = f"speedups {', '.join(speedups)}" if speedups else _last_line(result)
    return result


def kloop_run(root: Path, candidate: Path, ident: str, args, cache: Path, label: str, out: Path | None,
              server: tuple[str, str] | None = None) -> dict:
    """``kloop eval`` in a fresh CLI process: with its own harness, or through ``server`` (URL, token)."""
    env = {**os.environ, "KLOOP_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "agent", "eval", f"pkb:{ident}", str(candidate), "--world",
               str(args.world), "--device", args.device, "--trials", str(args.trials), "--json"]
    if server:
        command += ["--server", server[0]]
        env["KLOOP_TOKEN"] = server[1]
    else:
        command += ["--pkb-root", str(root)]
    if args.allow_nccl:
        command.append("--allow-nccl")
    result = run(command, ROOT, env, args.timeout_s, out / f"kloop_{label}.log" if out else None)
    try:
        report = json.loads(result["stdout"])
    except ValueError:
        result.update(status="timeout" if result["exit"] == "timeout" else "failed", detail=_last_line(result))
        return result
    result["status"] = report["status"]
    result["harness_s"] = report.get("wall_s")
    result["stages"] = report.get("stage_wall_s")
    speedup = report.get("speedup")
    ci = report.get("speedup_ci")
    result["detail"] = (f"speedup {speedup:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") if speedup
                        else report.get("message", "")[:120])
    return result


def kloop_server_runs(root: Path, candidate: Path, ident: str, args, cache: Path, out: Path | None) -> list[dict]:
    """The first evaluation through a fresh ``kloop serve`` (its harness starts), then
    ``server_runs`` more. The server reads the checkout and the build cache from its environment."""
    from service_load import start_server, stop_server

    os.environ.update(KLOOP_PKB_ROOT=str(root), KLOOP_CACHE_DIR=str(cache))
    gpus = ["--gpus", "0" if args.device == "cuda" else "", "--cpu-slots", "1"]
    with tempfile.TemporaryDirectory(prefix="vs-pkb-server-") as folder:
        server, token = start_server(Path(folder) / "store.db", args.port, gpus)
        try:
            return [kloop_run(root, candidate, ident, args, cache, f"server{run}", out, (f"http://127.0.0.1:{args.port}", token))
                    for run in range(1 + args.server_runs)]
        finally:
            stop_server(server)


def _last_line(result: dict) -> str:
    lines = [line for line in (result["stderr"] + "\n" + result["stdout"]).splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pkb-root", type=Path, default=Path(os.environ.get("KLOOP_PKB_ROOT") or ROOT / ".pkb"))
    parser.add_argument("--problem", default="1", help="PKB problem id or stem")
    parser.add_argument("--candidate", type=Path, default=ROOT / "benchmarks/candidates/pkb_allreduce_copy_cuda.py")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu", "emulate"])
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--warm-runs", type=int, default=1)
    parser.add_argument("--allow-nccl", action="store_true")
    parser.add_argument("--skip-pkb", action="store_true", help="time kloop only (PKB's harness needs CUDA and torchrun)")
    parser.add_argument("--server", action="store_true", help="also time the warm runs through a `kloop serve` of this tree")
    parser.add_argument("--server-runs", type=int, default=3, help="warm evaluations through the server after its first")
    parser.add_argument("--port", type=int, default=8393, help="the server's port on loopback (with --server)")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per run")
    parser.add_argument("--out", type=Path, help="folder for the JSON and the logs of every run")
    args = parser.parse_args(argv)

    from problems.pkb import checkout_root, resolve_stem

    root = checkout_root(args.pkb_root)
    stem = resolve_stem(root, args.problem)
    candidate = args.candidate.resolve()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    labels = ["cold", *(f"warm {i}" if args.warm_runs > 1 else "warm" for i in range(1, args.warm_runs + 1))]
    rows, results = [], {"pkb": {}, "kloop": {}, "kloop --server": {}}
    with tempfile.TemporaryDirectory(prefix="vs-pkb-") as tmp:
        ext_dir, cache = Path(tmp) / "torch_extensions", Path(tmp) / "kloop_cache"
        for label in labels:
            tag = label.replace(" ", "")
            if not args.skip_pkb:
                result = pkb_run(root, candidate, stem, args, ext_dir, tag, args.out)
                results["pkb"][label] = result
                rows.append(["ParallelKernelBench run_local", label, result["wall_s"], None, result["status"], result["detail"]])
                print(f"pkb {label}: {result['status']} in {result['wall_s']} s", flush=True)
            result = kloop_run(root, candidate, stem, args, cache, tag, args.out)
            results["kloop"][label] = result
            rows.append(["kloop eval", label, result["wall_s"], result.get("harness_s"), result["status"], result["detail"]])
            print(f"kloop {label}: {result['status']} in {result['wall_s']} s", flush=True)
        if args.server:
            server_labels = ["first (starts the harness)", *(f"warm {i}" for i in range(1, args.server_runs + 1))]
            for label, result in zip(server_labels, kloop_server_runs(root, candidate, stem, args, cache, args.out)):
                results["kloop --server"][label] = result
                rows.append(["kloop eval --server", label, result["wall_s"], result.get("harness_s"), result["status"], result["detail"]])
                print(f"kloop --server {label}: {result['status']} in {result['wall_s']} s", flush=True)
    ratios = []
    compared = [(label, "kloop", [results["kloop"].get(label)]) for label in labels]
    compared.append(("warm", "kloop --server, median", [r for label, r in results["kloop --server"].items() if label.startswith("warm")]))
    for label, side, runs in compared:
        pkb = results["pkb"].get(label if label in results["pkb"] else labels[-1])
        walls = [r["wall_s"] for r in runs if r and isinstance(r["wall_s"], float)]
        if pkb and walls and not args.skip_pkb:
            ratio = pkb["wall_s"] / statistics.median(walls)
            goal = GOALS["cold" if label == "cold" else "warm"]
            ratios.append({"run": f"{label} ({side})", "ratio": round(ratio, 2), "goal": goal, "met": ratio >= goal,
                           "both_correct": pkb["status"] == "correct" and all(r["status"] == "correct" for r in runs)})
    print_table(f"ParallelKernelBench vs kloop: {stem}, {candidate.name}, world {args.world}, {args.device}, {args.trials} trials",
                ["harness", "run", "wall_s", "harness_s", "status", "detail"], rows)
    if ratios:
        print_table("wall-time ratio PKB / kloop (goal: cold >= 6x, warm >= 20x)", ["run", "ratio", "goal", "met", "both correct"],
                    [[r["run"], r["ratio"], r["goal"], "yes" if r["met"] else "no", "yes" if r["both_correct"] else "NO"]
                     for r in ratios])
    if args.out:
        slim = {side: {label: {k: v for k, v in r.items() if k not in ("stdout", "stderr")} for label, r in runs.items()}
                for side, runs in results.items()}
        (args.out / "vs_pkb.json").write_text(json.dumps({"problem": stem, "candidate": str(candidate), "world": args.world,
                                                          "device": args.device, "runs": slim, "ratios": ratios}, indent=2))
    return 0 if all(r["status"] == "correct" for runs in (results["kloop"], results["kloop --server"]) for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
