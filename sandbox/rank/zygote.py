"""Start a group's rank processes from one process that has already imported torch.

``python -m sandbox.rank CONFIG_JSON`` (candidates, inside their jail) and the reference's
trusted launcher both end here: the zygote imports torch once, forks one process per rank, each
with its own channel and log descriptor (inherited; there is no socket anyone can connect to),
and waits for them. It dies with its parent; each rank dies with the zygote.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import sys
from typing import Any, Callable

_PR_SET_PDEATHSIG = 1
# what torch._check imports on its first call (with sympy): torch's symmetric memory checks a new buffer's shape
# with it, so without this a candidate's first symmetric buffer took 2.0-4.4 s on the H200 and the next 0.3 ms
# (benchmarks/first_call.py --steps, and a py-spy profile of it). A plain import: nothing on the device changes.
SHAPE_CHECKS = "torch.fx.experimental.symbolic_shapes"


def die_with_parent() -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def run_ranks(config: dict[str, Any], make_server: Callable[[Any, dict[str, Any]], Any], wall_off: bool = False) -> int:
    """Fork a rank per entry of ``config["ranks"]`` ({"rank", "channel", "log"} fds) and serve each
    with ``make_server(channel, rank_config)``; returns when every rank has ended. With
    ``wall_off`` each rank first enters a Landlock domain of its own (sandbox.jail.landlock.wall_off;
    ``rank_config["walled_off"]`` says whether it held)."""
    import warnings

    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
    import torch  # noqa: F401 - imported once here, shared by every forked rank
    import torch.distributed  # noqa: F401

    if config.get("import_shape_checks"):
        importlib.import_module(SHAPE_CHECKS)
    from sandbox.rank.wire import Channel

    die_with_parent()
    children = []
    own_fds = [fd for entry in config["ranks"] for fd in (entry["channel"], entry["log"])]
    for entry in config["ranks"]:
        pid = os.fork()
        if pid == 0:  # the rank
            code = 1
            try:
                die_with_parent()
                for fd in own_fds:
                    if fd not in (entry["channel"], entry["log"]):
                        os.close(fd)
                os.dup2(entry["log"], 1)
                os.dup2(entry["log"], 2)
                os.close(entry["log"])
                sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
                sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
                rank = entry["rank"]
                local = 0 if config["mode"] == "emulate" else rank
                # torchrun's variables, which code written for torchrun launches (ParallelKernelBench's) reads
                os.environ.update(RANK=str(rank), LOCAL_RANK=str(local), WORLD_SIZE=str(config["world"]))
                rank_config = {**config, "rank": rank, "walled_off": wall_off and _walled_off()}
                make_server(Channel.from_fd(entry["channel"]), rank_config).serve()
                code = 0
            except BaseException:  # noqa: BLE001 - the parent sees the channel close and reads the log
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    for fd in own_fds:
        os.close(fd)
    status = 0
    for pid in children:
        _, code = os.waitpid(pid, 0)
        status = status or (1 if code else 0)
    return status


def walls_ranks_off(mode: str, world: int) -> bool:
    """Whether a candidate's ranks are walled off from each other (:func:`main`): on a CPU, where no
    rank needs another's descriptors (a GPU's ranks share device memory through them), in a group of
    several."""
    return mode == "cpu" and world > 1


def _walled_off() -> bool:
    from sandbox.jail.landlock import wall_off

    try:
        return wall_off()
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    """A candidate's ranks. Where :func:`walls_ranks_off`, each rank is walled off from the others
    before any candidate code runs: a rank's sealed copy of a call's bytes (sandbox/rank/commitment.py)
    is then one it made itself (tests/fixtures/hostile/root_seals_copies_for_peers.py,
    reduce_to_root_seals_scm_rights.py)."""
    from sandbox.rank.server import RankServer

    argv = sys.argv[1:] if argv is None else argv
    config = json.loads(argv[0])
    return run_ranks(config, RankServer, wall_off=walls_ranks_off(config["mode"], config["world"]))
