"""Does what candidate ranks do on a GPU still work inside the jail? One line per check.

    python tests/gpu_probes/jail_cuda.py          # from the repository root, as root, on a GPU host

In jails with devices="cuda" and network="none", all ranks on ONE GPU (CUDA_VISIBLE_DEVICES
picks it; default the first): the jail's measures; device access (the NVIDIA devices and
/proc/driver/nvidia open, other devices, /etc/shadow and TCP not); then at world 1, 2 and 4:
CUDA init, a default process group over a FileStore in the private /tmp, symmetric memory
(`empty` + `rendezvous`; several ranks on one device with
TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1) and a copy through every peer's pointer, checked
for exact values. Multicast stays off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NCCL_NVLS_ENABLE=0).
Prints "PASS <check>: ..." or "FAIL <check>: ..." per check; exits 1 if any failed.

Inside the jail this file runs as ``--devices``, ``--launch WORLD`` (starts the ranks) and
``--rank R WORLD`` (stdlib and torch only: the project is not readable there).
"""

from __future__ import annotations

import glob
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

WORLDS = (1, 2, 4)
ELEMENTS = 1 << 16
TIMEOUT_S = 300


def rank_main(rank: int, world: int) -> None:
    import warnings

    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem
    import torch.testing._internal.distributed.fake_pg  # noqa: F401 - registers the "fake" backend (no network needed)

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    torch.zeros(1, device=device)
    store = dist.FileStore(os.path.join(os.environ["TMPDIR"], "store"), world)
    dist.init_process_group("fake", store=store, rank=rank, world_size=world)
    group = dist.group.WORLD
    with warnings.catch_warnings():  # deprecated where rendezvous finds the store itself; harmless there
        warnings.simplefilter("ignore")
        symm_mem.enable_symm_mem_for_group(group.group_name)
    local = symm_mem.empty(ELEMENTS, dtype=torch.float32, device=device)
    handle = symm_mem.rendezvous(local, group)
    pattern = torch.arange(ELEMENTS, dtype=torch.float32, device=device)
    local.copy_(pattern + 1000.0 * (rank + 1))
    handle.barrier(channel=0)
    for peer in range(world):
        copied = handle.get_buffer(peer, (ELEMENTS,), torch.float32).clone()
        expected = pattern + 1000.0 * (peer + 1)
        if not torch.equal(copied, expected):
            bad = int((copied != expected).sum())
            raise SystemExit(f"rank {rank}: {bad} of {ELEMENTS} values read through peer {peer}'s pointer are wrong")
    handle.barrier(channel=0)
    torch.cuda.synchronize()
    print(f"rank {rank}/{world}: ok (buffer_ptrs {len(handle.buffer_ptrs)})", flush=True)


def launch_main(world: int) -> None:
    ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(world)]) for r in range(world)]
    sys.exit(max(rank.wait() for rank in ranks))


def devices_main(gpu_node: str) -> None:
    import errno
    import socket

    def attempt(name, action):
        try:
            action()
            return f"{name}=open"
        except OSError as error:
            return f"{name}={errno.errorcode.get(error.errno, error.errno)}"

    print(" ".join([
        attempt("nvidiactl", lambda: os.close(os.open("/dev/nvidiactl", os.O_RDWR))),
        attempt("gpu", lambda: os.close(os.open(gpu_node, os.O_RDWR))),
        attempt("driver_version", lambda: open("/proc/driver/nvidia/version").read()),
        attempt("kmsg", lambda: os.close(os.open("/dev/kmsg", os.O_RDONLY))),
        attempt("shadow", lambda: open("/etc/shadow").read()),
        attempt("tcp_bind", lambda: socket.socket().bind(("127.0.0.1", 0))),
    ]))


DEVICE_EXPECTED = {"nvidiactl": "open", "gpu": "open", "driver_version": "open"}
DEVICE_REFUSED = ("kmsg", "shadow", "tcp_bind")


def _tree_env() -> dict[str, str]:
    from kloop_runtime.settings import MULTICAST_OFF

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1",
           "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1", **MULTICAST_OFF}
    for name in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _jailed(argv_tail: list[str]) -> tuple[int, str, tuple[str, ...]]:
    """Run this file with ``argv_tail`` in a fresh cuda jail; (returncode, output, measures)."""
    from sandbox.jail import Jail, JailSpec

    workdir = tempfile.mkdtemp(prefix="kloop-jail-gpu-")
    try:
        shutil.copy(__file__, os.path.join(workdir, "probe.py"))
        libraries = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
        spec = JailSpec(workdir=workdir, readable=tuple(libraries), network="none", devices="cuda", env=_tree_env())
        with Jail.start(spec, [sys.executable, "probe.py", *argv_tail], stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as jail:
            output = _read_until_eof(jail, time.monotonic() + TIMEOUT_S)
            returncode = jail.wait(TIMEOUT_S)
        return returncode, output, jail.measures
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _read_until_eof(jail, deadline: float) -> str:
    """The tree's output until it is gone (EOF), ending the jail at the deadline."""
    chunks, fd = [], jail.process.stdout.fileno()
    while True:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            jail.kill()
            chunks.append(b"\n[timed out]")
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def run_checks() -> list[tuple[bool, str]]:
    """(passed, line) per check."""
    lines = []
    gpu_node = next(iter(sorted(glob.glob("/dev/nvidia[0-9]*"))), "/dev/nvidia0")  # the jail may not list /dev
    code, output, measures = _jailed(["--devices", gpu_node])
    wanted = {"pid-namespace", "net-namespace", "private-tmp", "private-shm", "caps-dropped", "no-new-privs", "landlock-net",
              "landlock-scope-signal"}
    lines.append((wanted <= set(measures), f"jail measures: {' '.join(measures)}"))
    got = dict(item.split("=", 1) for item in output.split() if "=" in item)
    fine = code == 0 and all(got.get(k) == v for k, v in DEVICE_EXPECTED.items()) and all(
        got.get(k, "open") != "open" for k in DEVICE_REFUSED)
    lines.append((fine, f"device access: {output.strip() or f'exit {code}'}"))
    for world in WORLDS:
        code, output, _ = _jailed(["--launch", str(world)])
        ok = code == 0 and output.count(": ok") == world
        detail = "cuda init, FileStore group, symm_mem rendezvous, exact peer-pointer copies" if ok else output.strip()[-1500:]
        lines.append((ok, f"world={world} on one GPU: {detail} (exit {code})"))
    return lines


def main() -> int:
    if sys.argv[1:2] == ["--rank"]:
        rank_main(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    if sys.argv[1:2] == ["--launch"]:
        launch_main(int(sys.argv[2]))
    if sys.argv[1:2] == ["--devices"]:
        devices_main(sys.argv[2])
        return 0
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    results = run_checks()
    for passed, line in results:
        print(("PASS " if passed else "FAIL ") + line, flush=True)
    return 0 if all(passed for passed, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
