"""Run a compiler in a jail of its own: ``python -m sandbox.harness.confined_exec --write DIR
[--read PATH] -- cmd ...``.

Compilers read hostile source and hostile flags: an ``#include "/etc/shadow"`` quotes the file
back in the compiler's log, and torch writes an extension's flags unquoted into a ninja file that
``/bin/sh`` runs, so a flag is a shell command. Landlock alone (read the system, write the build
folder) left those commands running as the judge's user, with its environment, network and
credentials in /etc, and free to outlive the build (tests/fixtures/hostile/compile_*). Here the
command is the root of a jailed tree (sandbox.jail: the ranks' confinement): an unprivileged uid,
no network, no /etc secrets, an environment of the compiler's variables only, the build folder
its only writable one; the whole tree ends when the command does. The judge hands
:func:`confined_command` to :mod:`kloop_runtime.build` as its ``confine``."""

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

# what a compiler run may see of the caller's environment (the jail sets PATH, HOME and TMPDIR)
COMPILER_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "NVCC", "CC", "CXX", "TORCH_CUDA_ARCH_LIST",
                "MAX_JOBS", "LD_LIBRARY_PATH")


def confined_command(cmd: list[str], build_dir: Path, extra_read: Sequence[str] = ()) -> list[str]:
    """``cmd`` run under this module: writing only under ``build_dir``, reading system folders and ``extra_read``."""
    reads = [arg for path in extra_read for arg in ("--read", path)]
    return [sys.executable, "-P", "-m", "sandbox.harness.confined_exec", "--write", str(build_dir), *reads, "--", *cmd]


def main() -> int:
    from sandbox.jail import Jail, JailError, JailSpec

    parser = argparse.ArgumentParser(description="Run a compiler in a jail that may write only the build folder.")
    parser.add_argument("--write", required=True, help="the build folder: the only one the command may write")
    parser.add_argument("--read", action="append", default=[], help="a further file or folder it may read")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command given")
    env = {name: os.environ[name] for name in COMPILER_ENV if name in os.environ}
    try:
        spec = JailSpec(workdir=args.write, readable=tuple(args.read), network="none", env=env)
        with Jail.start(spec, cmd, stdout=sys.stdout.fileno(), stderr=sys.stderr.fileno()) as jail:
            returncode = jail.wait()
    except JailError as error:
        print(f"the compiler's jail could not be set up: {error}", file=sys.stderr)
        return 125
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main())
