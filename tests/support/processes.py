"""Which processes a sandbox left running: found by the marker its commands carry in their
environment, so processes of other work on the machine never count."""

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
