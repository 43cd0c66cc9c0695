"""Where kernel-loop keeps its caches, and the environment that keeps NVLink multicast off.

The one place these are defined: the runtime's compiler, the harness, the sandbox backends
and the topology probe read them from here.

- ``$KLOOP_CACHE_DIR`` (default ``~/.cache/kernel-loop``) is the cache root;
- ``$KLOOP_COMPILE_CACHE`` (default ``<root>/compile``) holds compiled cubins and extensions, at most
  ``$KLOOP_COMPILE_CACHE_GIB`` GiB of them (default 8): the least recently used go first;
- ``<root>/topology`` holds this host's measured topology;
- ``<root>/bytecode`` holds torch's bytecode for rank processes, when torch ships without it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CACHE_ROOT_ENV = "KLOOP_CACHE_DIR"
COMPILE_CACHE_ENV = "KLOOP_COMPILE_CACHE"
COMPILE_CACHE_GIB_ENV = "KLOOP_COMPILE_CACHE_GIB"
COMPILE_CACHE_GIB = 8.0

# Set in every process that may touch NCCL, torch symmetric memory or NVSHMEM: NVLink multicast
# (NVLS / multimem) is switched off on the machines kernel-loop runs on.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """``$KLOOP_CACHE_DIR`` (of ``env``, default this process's), else ``~/.cache/kernel-loop``."""
    root = (os.environ if env is None else env).get(CACHE_ROOT_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "kernel-loop")
    return Path(root)


def compile_cache_dir() -> Path:
    """``$KLOOP_COMPILE_CACHE``, else ``compile/`` under the cache root."""
    return Path(os.environ.get(COMPILE_CACHE_ENV) or cache_root() / "compile")


def compile_cache_max_bytes() -> int:
    """What the compile cache may hold: ``$KLOOP_COMPILE_CACHE_GIB`` GiB, else COMPILE_CACHE_GIB
    (a value that is not a positive number counts as unset)."""
    try:
        gib = float(os.environ.get(COMPILE_CACHE_GIB_ENV, ""))
    except ValueError:
        gib = COMPILE_CACHE_GIB
    return int((gib if gib > 0 else COMPILE_CACHE_GIB) * 2**30)


def rank_bytecode_dir(env: Mapping[str, str] | None = None) -> Path:
    """``bytecode/`` under the cache root (sandbox.harness.bytecode)."""
    return cache_root(env) / "bytecode"


def topology_cache_dir(root: Path | None = None) -> Path:
    """``topology/`` under ``root`` (default: the cache root)."""
    return (root or cache_root()) / "topology"
