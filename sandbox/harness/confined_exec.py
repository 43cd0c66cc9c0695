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
:func:`confined_command` to :mod:`kloop_runtime.build` as its ``confine``.

The build folder sits in the compile cache, on the host's disk, and the jail's own limits let a tree
write any number of files of up to 16 GiB there. So while the command runs, every ``WATCH_S``, the
folder is added up (folder_usage.py: blocks allocated, links not followed) and the free space of its
disk read; the tree is ended, with a line in the compiler's log that says why, when the folder holds
more than ``MAX_FOLDER_BYTES`` (an extension's build writes tens of MB) or too many entries to count,
or when the disk's free space falls below ``DISK_FLOOR_BYTES`` (or half of what was free when the
command began, where less was): that one also catches files written and deleted while still held open,
which no folder shows (tests/sandbox/harness/test_confined_exec.py)."""

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sandbox.harness import folder_usage

# what a compiler run may see of the caller's environment (the jail sets PATH, HOME and TMPDIR)
COMPILER_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "NVCC", "CC", "CXX", "TORCH_CUDA_ARCH_LIST",
                "MAX_JOBS", "LD_LIBRARY_PATH")
WATCH_S = 0.2
MAX_FOLDER_BYTES = 4 * 2**30
DISK_FLOOR_BYTES = 2 * 2**30
GIB = 2**30
STOPPED = 125  # the exit status when the jail could not be set up or the command was stopped


def confined_command(cmd: list[str], build_dir: Path, extra_read: Sequence[str] = ()) -> list[str]:
    """``cmd`` run under this module: writing only under ``build_dir``, reading system folders and ``extra_read``."""
    reads = [arg for path in extra_read for arg in ("--read", path)]
    return [sys.executable, "-P", "-m", "sandbox.harness.confined_exec", "--write", str(build_dir), *reads, "--", *cmd]


def disk_free_bytes(folder: str) -> int:
    found = os.statvfs(folder)
    return found.f_bavail * found.f_frsize


def default_floor(free_bytes: int) -> int:
    """DISK_FLOOR_BYTES, or half of ``free_bytes`` (what was free at the start) where that is less:
    never a floor a nearly full disk is already under, which would stop every build at once."""
    return min(DISK_FLOOR_BYTES, free_bytes // 2)


def overrun(folder: str, max_folder_bytes: int, disk_floor_bytes: int) -> str | None:
    """Why the build must stop now, or None."""
    used, entries = folder_usage.folder_bytes(folder)
    if entries > folder_usage.MAX_ENTRIES:
        return f"more than {folder_usage.MAX_ENTRIES} files and folders to its build folder"
    if used > max_folder_bytes:
        return f"{used / GIB:.2f} GiB to its build folder (the limit is {max_folder_bytes / GIB:g} GiB)"
    free = disk_free_bytes(folder)
    if free < disk_floor_bytes:
        return (f"until its disk had {free / GIB:.2f} GiB free (the floor is {disk_floor_bytes / GIB:.2f} GiB; files it deleted "
                "while holding them open count too)")
    return None


def run_watched(jail, folder: str, max_folder_bytes: int, disk_floor_bytes: int) -> int:
    """Wait for the jailed command, ending the tree when it writes past the limits."""
    while True:
        try:
            return jail.wait(WATCH_S)
        except subprocess.TimeoutExpired:
            reason = overrun(folder, max_folder_bytes, disk_floor_bytes)
            if reason:
                jail.kill()
                print(f"the compiler was stopped: it wrote {reason}", file=sys.stderr)
                return STOPPED


def main() -> int:
    from sandbox.jail import Jail, JailError, JailSpec, own_uid

    parser = argparse.ArgumentParser(description="Run a compiler in a jail that may write only the build folder.")
    parser.add_argument("--write", required=True, help="the build folder: the only one the command may write")
    parser.add_argument("--read", action="append", default=[], help="a further file or folder it may read")
    parser.add_argument("--max-folder-bytes", type=int, default=MAX_FOLDER_BYTES, help="stop the command past this much in the build folder")
    parser.add_argument("--disk-floor-bytes", type=int, default=None,
                        help="stop the command when its disk has less free (default: DISK_FLOOR_BYTES, or half of what is free "
                             "at the start where that is less)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command given")
    env = {name: os.environ[name] for name in COMPILER_ENV if name in os.environ}
    floor = args.disk_floor_bytes if args.disk_floor_bytes is not None else default_floor(disk_free_bytes(args.write))
    try:
        spec = JailSpec(workdir=args.write, readable=tuple(args.read), network="none", env=env, uid=own_uid())
        with Jail.start(spec, cmd, stdout=sys.stdout.fileno(), stderr=sys.stderr.fileno()) as jail:
            returncode = run_watched(jail, spec.workdir, args.max_folder_bytes, floor)
    except JailError as error:
        print(f"the compiler's jail could not be set up: {error}", file=sys.stderr)
        return STOPPED
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main())
