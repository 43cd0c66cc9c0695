"""Load on a running ``kloop serve``: N evaluations submitted by C concurrent clients, each then
followed to its end. Checks that none is lost or duplicated and prints the API latency (submit,
and status reads while the queue drains) and the throughput.

    python benchmarks/service_load.py --server http://127.0.0.1:8377 --evals 200 --clients 20   # token: $KLOOP_TOKEN
    python benchmarks/service_load.py --start --evals 200 --clients 20 --cpu-slots 2              # starts its own server

Only loopback addresses are allowed as targets. The load is bounded: N submissions, then status
polls until every job has ended or --timeout passes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import httpx

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = ("127.", "localhost", "::1", "[::1]")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def eval_body(problem: str, device: str, world: int, source: str) -> dict:
    return {"problem": problem, "source": source, "world": world, "device": device, "allow_nccl": True, "trials": 1,
            "timed": device == "cuda"}


def run_load(server: str, token: str, evals: int, clients: int, body: dict, timeout_s: float = 1800.0) -> dict:
    """Submit ``evals`` jobs from ``clients`` threads (each with its own connection), then wait for
    all to end. Returns the numbers (and raises nothing: the caller checks them)."""
    host = urlparse(server).hostname or ""
    if not host.startswith(LOOPBACK):
        raise SystemExit(f"{server}: only loopback targets are allowed")
    submit_ms: list[float] = []
    poll_ms: list[float] = []
    ids: list[str] = []
    retries = 0
    lock = threading.Lock()

    def client(count: int) -> None:
        nonlocal retries
        with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            for _ in range(count):
                key = uuid.uuid4().hex  # a retried POST reuses it: the server makes one job
                for attempt in range(5):
                    started = time.perf_counter()
                    try:
                        response = http.post("/v1/evals", json=body, headers={"Idempotency-Key": key})
                    except httpx.HTTPError:
                        with lock:
                            retries += 1
                        time.sleep(0.5 * (attempt + 1))
                        continue
                    elapsed = (time.perf_counter() - started) * 1000
                    response.raise_for_status()
                    with lock:
                        submit_ms.append(elapsed)
                        ids.append(response.json()["id"])
                    break

    started = time.perf_counter()
    shares = [evals // clients + (1 if i < evals % clients else 0) for i in range(clients)]
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, shares))
    submitted_s = time.perf_counter() - started

    pending = set(ids)
    final: dict[str, dict] = {}
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        while pending and time.monotonic() < deadline:
            for job_id in list(pending):
                t0 = time.perf_counter()
                job = http.get(f"/v1/jobs/{job_id}").json()
                poll_ms.append((time.perf_counter() - t0) * 1000)
                if job["status"] in ("done", "failed", "cancelled", "interrupted"):
                    final[job_id] = job
                    pending.discard(job_id)
            time.sleep(0.5)
        listed = http.get("/v1/jobs", params={"mine": True, "limit": 1000}).json()
    total_s = time.perf_counter() - started
    verdicts: dict[str, int] = {}
    for job in final.values():
        key = job["status"] if job["status"] != "done" else f"done:{(job['result'] or {}).get('status')}"
        verdicts[key] = verdicts.get(key, 0) + 1
    mine = {job["id"] for job in listed}
    return {
        "submitted": len(ids), "distinct_ids": len(set(ids)), "ended": len(final), "not_ended": len(pending),
        "listed_by_server": len(mine & set(ids)), "verdicts": verdicts, "client_retries": retries,
        "submit_p50_ms": percentile(submit_ms, 50), "submit_p99_ms": percentile(submit_ms, 99), "submit_max_ms": max(submit_ms or [0]),
        "status_p50_ms": percentile(poll_ms, 50), "status_p99_ms": percentile(poll_ms, 99), "status_reads": len(poll_ms),
        "submit_phase_s": submitted_s, "total_s": total_s, "evals_per_min": 60 * len(final) / total_s if total_s else 0.0,
    }


def start_server(db: Path, port: int, extra: list[str]):
    import subprocess

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    token = subprocess.run([sys.executable, "-m", "agent", "serve", "token", "create", "load", "--db", str(db), "--max-running", "1000"],
                           capture_output=True, text=True, check=True, env=env, cwd=ROOT).stdout.strip()
    process = subprocess.Popen([sys.executable, "-m", "agent", "serve", "--db", str(db), "--port", str(port), *extra],
                               env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=2).status_code == 200:
                return process, token
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("the server did not start: " + (process.stdout.read() if process.stdout else ""))


def stop_server(process) -> None:
    """End a server ``start_server`` started, with everything it started (its own session)."""
    import signal

    os.killpg(process.pid, signal.SIGTERM)
    process.wait(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", help="URL of a running server (token: $KLOOP_TOKEN)")
    parser.add_argument("--start", action="store_true", help="start a server of this tree on a fresh store")
    parser.add_argument("--port", type=int, default=8391)
    parser.add_argument("--evals", type=int, default=200)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--problem", default="all_reduce")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--solution", type=Path, default=None, help="default: the problem's reference (correct, allow_nccl)")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("server_args", nargs="*", help="after --: arguments for kloop serve (e.g. -- --cpu-slots 2 --gpus 0)")
    args = parser.parse_args()
    process = None
    if args.start:
        import tempfile

        db = Path(tempfile.mkdtemp(prefix="kloop-load-")) / "jobs.db"
        process, token = start_server(db, args.port, args.server_args)
        server = f"http://127.0.0.1:{args.port}"
    else:
        server, token = args.server, os.environ.get("KLOOP_TOKEN", "")
        if not server or not token:
            parser.error("--server URL and $KLOOP_TOKEN, or --start")
    from problems import find_problem

    source = args.solution.read_text() if args.solution else find_problem(args.problem).reference_source
    try:
        numbers = run_load(server, token, args.evals, args.clients, eval_body(args.problem, args.device, args.world, source), args.timeout)
    finally:
        if process is not None:
            stop_server(process)
    if args.json:
        print(json.dumps(numbers, indent=2))
    else:
        print(f"{numbers['submitted']} evaluations ({args.problem}, {args.device}, world {args.world}) from {args.clients} clients")
        print(f"  distinct ids {numbers['distinct_ids']}, ended {numbers['ended']}, not ended {numbers['not_ended']}, "
              f"listed by the server {numbers['listed_by_server']}, client retries {numbers['client_retries']}")
        print(f"  verdicts: {numbers['verdicts']}")
        print(f"  submit latency: p50 {numbers['submit_p50_ms']:.1f} ms, p99 {numbers['submit_p99_ms']:.1f} ms, "
              f"max {numbers['submit_max_ms']:.1f} ms ({numbers['submit_phase_s']:.1f} s to submit all)")
        print(f"  status latency: p50 {numbers['status_p50_ms']:.1f} ms, p99 {numbers['status_p99_ms']:.1f} ms "
              f"over {numbers['status_reads']} reads")
        print(f"  all ended in {numbers['total_s']:.1f} s: {numbers['evals_per_min']:.1f} evaluations a minute")
    ok = numbers["distinct_ids"] == numbers["submitted"] == args.evals == numbers["ended"] == numbers["listed_by_server"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
