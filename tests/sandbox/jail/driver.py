"""Run one jail (or, with "old", the harness's former confinement) and print what happened.

``python driver.py CONFIG_JSON``, as root or as uid 65534 (tests/sandbox/jail/support.py). Its
own environment holds a fake API key, which the probes look for in /proc/<this pid>/environ;
"{driver_pid}" in argv becomes this process's pid. Prints one JSON line: measures, gaps,
returncode, and kill_s when the jail was killed after ``kill_when`` appeared.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from sandbox.jail import Jail, JailSpec  # noqa: E402


def wait_for(path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s} s")
        time.sleep(0.05)


def main() -> None:
    config = json.loads(sys.argv[1])
    argv = [arg.replace("{driver_pid}", str(os.getpid())) for arg in config["argv"]]
    timeout_s = config.get("timeout_s", 120)
    if config.get("old"):  # as the local backend ran a command before: its own session, an env allow-list
        process = subprocess.Popen(argv, cwd=config["spec"]["workdir"], env=config["old_env"], start_new_session=True)
        print(json.dumps({"returncode": process.wait(timeout_s)}))
        return
    jail = Jail.start(JailSpec(**config["spec"]), argv)
    out = {"measures": list(jail.measures), "gaps": list(jail.gaps)}
    if config.get("kill_when"):
        wait_for(config["kill_when"], timeout_s)
        started = time.monotonic()
        jail.kill()
        out["kill_s"] = round(time.monotonic() - started, 3)
    else:
        jail.wait(timeout_s)
    out["returncode"] = jail.returncode
    print(json.dumps(out))


if __name__ == "__main__":
    main()
