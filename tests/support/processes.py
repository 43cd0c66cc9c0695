"""Which processes a sandbox left running: found by the marker its commands carry in their
environment, so processes of other work on the machine never count."""

import time

import psutil


def leftover_processes(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("KLOOP_SANDBOX") == marker:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def still_running(processes: list[psutil.Process], wait_s: float = 10.0) -> list[str]:
    """Those of ``processes`` still running (a zombie has ended) once they have had ``wait_s`` to end,
    each as ``pid: command line``."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for process in processes:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{process.pid}: {' '.join(process.cmdline())[:120]}")
            except psutil.Error:
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)
