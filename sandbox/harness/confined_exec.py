"""Run a command under Landlock: read system folders, write only the given folders.

``python -m sandbox.harness.confined_exec --write DIR [--read DIR] -- cmd ...``. Used for
compilers, which read hostile source (an ``#include "/home/me/.netrc"`` must fail): the judge
hands :func:`confined_command` to :mod:`kloop_runtime.build` as its ``confine``."""

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from sandbox.harness.confine import apply_landlock, system_read_paths


def confined_command(cmd: list[str], build_dir: Path, extra_read: Sequence[str] = ()) -> list[str]:
    """``cmd`` run under this module: writing only under ``build_dir``, reading system folders and ``extra_read``."""
    reads = [arg for path in extra_read for arg in ("--read", path)]
    return [sys.executable, "-m", "sandbox.harness.confined_exec", "--write", str(build_dir), *reads, "--", *cmd]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="append", default=[])
    parser.add_argument("--read", action="append", default=[])
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command given")
    apply_landlock(system_read_paths() + args.read, args.write + ["/dev/null"])
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    sys.exit(main())
