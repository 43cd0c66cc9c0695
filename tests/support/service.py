"""A real ``kloop serve`` process on loopback, on a fresh store, for the service's tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "problems" / "collective" / "all_reduce" / "reference.py").read_text()
HANG = (ROOT / "tests" / "fixtures" / "candidates" / "all_reduce_hang.py").read_text()
QUICK_EVAL = {"problem": "all_reduce", "source": REFERENCE, "allow_nccl": True, "timed": False, "trials": 1}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    def __init__(self, folder: Path, *args: str, env: dict[str, str] | None = None):
        self.folder = folder
        self.db = folder / "jobs.db"
        self.args, self.env = args, env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / "server.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 180.0) -> ServerProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        log = self.log_path.open("a")
        self.process = subprocess.Popen([sys.executable, "-m", "agent", "serve", "--db", str(self.db), "--port", str(self.port),
                                         "--gpus", "", *self.args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited ({self.process.returncode}): {self.log()}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.3)
        raise RuntimeError(f"the server did not answer within {timeout_s} s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def token(self, name: str, **limits) -> str:
        from service.auth import Limits, create_token
        from service.store import Store

        store = Store(self.db)
        try:
            return create_token(store, name, Limits(**limits))
        finally:
            store.close()

    def client(self, token: str | None) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=60)

    def sandbox_processes(self) -> list[int]:
        """Processes carrying this server's marker (its harnesses and ranks)."""
        mine, found = str(self.db.resolve()), []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("KLOOP_SERVICE_DB") == mine:
                    found.append(proc.pid)
            except psutil.Error:
                continue
        return found

    def kill9(self) -> None:
        """SIGKILL the server alone (what it started lives on, as after a crash)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for pid in self.sandbox_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait_for(client: httpx.Client, job_id: str, statuses=("done", "failed", "cancelled", "interrupted"), timeout_s: float = 300) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in statuses:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still {job['status']} after {timeout_s} s")
