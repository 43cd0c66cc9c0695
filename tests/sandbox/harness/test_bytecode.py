"""Torch's bytecode compiled once for the ranks (sandbox.harness.bytecode): when it is needed, what
the folder may hold, who compiles it, and that jailed ranks read it and write none of it.

Real processes: the compile runs the isolated Python it runs for users, the evaluations a real
local sandbox and harness at world 2 (gloo), with ``KLOOP_RANK_BYTECODE=always`` because this
venv's torch has its own caches (where it has none, as on the H200, ``auto`` does the same).
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

import pytest

from sandbox.backends import LocalSandbox
from sandbox.evaluate import evaluate_in
from sandbox.harness import bytecode
from tests.support import hostile_corpus as hc

ROOT = Path(__file__).resolve().parents[3]
TAG = f".{sys.implementation.cache_tag}.pyc"

READS_THE_SHARED_BYTECODE = '''
import os
import sys

import torch
import torch.distributed as dist

_cached = torch.__spec__.cached


def solution(tensor):
    if not sys.pycache_prefix or not _cached.startswith(sys.pycache_prefix) or not os.path.isfile(_cached):
        raise RuntimeError(f"torch was not read from the shared bytecode: prefix {sys.pycache_prefix}, cached {_cached}")
    out = tensor.clone()
    dist.all_reduce(out)
    return out
'''


@pytest.fixture
def always(monkeypatch, tmp_path):
    monkeypatch.setenv("KLOOP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(bytecode.MODE_ENV, "always")
    return tmp_path / "cache"


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_torch_needs_none_when_it_has_its_own_caches(tmp_path, monkeypatch):
    init = tmp_path / "torch" / "__init__.py"
    init.parent.mkdir()
    init.write_text("")
    assert not bytecode.torch_has_caches(init)
    (init.parent / "__pycache__").mkdir()
    (init.parent / "__pycache__" / f"__init__{TAG}").write_bytes(b"")
    assert bytecode.torch_has_caches(init)
    monkeypatch.setenv(bytecode.MODE_ENV, "never")
    assert bytecode.ensure_rank_bytecode() is None and bytecode.rank_bytecode() is None
    assert bytecode._mode({bytecode.MODE_ENV: " Always "}) == "always"
    assert bytecode._mode({bytecode.MODE_ENV: "sometimes"}) == "auto"  # with a warning that names the choices


def test_only_the_bytecode_of_what_a_rank_may_read_is_kept(tmp_path):
    """A compiled file stays only if its source exists and a jailed rank may read it anyway."""
    import torch

    prefix = tmp_path / "prefix"
    torch_dir = Path(torch.__file__).parent
    mirror = lambda folder: prefix / Path(folder).relative_to("/")  # noqa: E731 - how pycache_prefix lays files out
    kept = mirror(torch_dir) / f"__init__{TAG}"
    removed = [
        mirror(ROOT / "sandbox" / "harness") / f"judge{TAG}",  # the judge: hidden from ranks
        mirror(ROOT / "problems") / f"__init__{TAG}",  # the problems, their oracles
        mirror(torch_dir) / f"no_such_module{TAG}",  # no source
        mirror(torch_dir) / f"__init__.{sys.implementation.cache_tag}.opt-1.pyc",  # never read by a rank
        mirror(torch_dir) / "notes.txt",
    ]
    for path in [kept, *removed]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    gone = bytecode.keep_readable_only(prefix, bytecode._readable_by_ranks())
    assert sorted(gone) == sorted(removed)
    assert kept.is_file()


def test_it_is_compiled_once_then_found(always):
    started = time.perf_counter()
    folder = bytecode.ensure_rank_bytecode()
    assert folder is not None and folder.parent == always / "bytecode", folder
    import torch

    compiled = folder / Path(torch.__file__).parent.relative_to("/") / f"__init__{TAG}"
    assert compiled.is_file() and compiled.stat().st_mode & 0o777 == 0o644
    assert not any(str(ROOT / "sandbox") in "/" + str(p.relative_to(folder)) for p in folder.rglob(f"*{TAG}"))
    first_s = time.perf_counter() - started
    before = _files(folder)
    started = time.perf_counter()
    assert bytecode.ensure_rank_bytecode() == folder == bytecode.rank_bytecode()
    assert time.perf_counter() - started < first_s / 10
    assert _files(folder) == before
    assert not list(folder.parent.glob(".compiling-*"))


def test_a_harness_that_finds_another_compiling_goes_on_without(always):
    (always / "bytecode").mkdir(parents=True)
    with open(always / "bytecode" / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = time.perf_counter()
        assert bytecode.ensure_rank_bytecode() is None
        assert time.perf_counter() - started < 1.0
        assert bytecode.rank_bytecode() is None


def _aged(folder: Path, days: float) -> Path:
    (folder / "usr").mkdir(parents=True)
    (folder / "usr" / f"mod{TAG}").write_bytes(b"")
    when = time.time() - days * 86400
    os.utime(folder, (when, when))
    return folder


def test_a_compile_killed_midway_is_cleared_and_old_installs_folders_go(always):
    stale = always / "bytecode" / ".compiling-999999"
    (stale / "usr").mkdir(parents=True)
    (stale / "usr" / f"half{TAG}").write_bytes(b"")
    unused = _aged(always / "bytecode" / "0123456789abcdef", days=30)  # another torch install's, unused for a month
    recent = _aged(always / "bytecode" / "fedcba9876543210", days=2)  # another's still in use
    folder = bytecode.ensure_rank_bytecode()
    assert folder is not None
    assert not stale.exists()
    assert not unused.exists()
    assert (recent / "usr" / f"mod{TAG}").is_file()
    # a sandbox starting with it marks it used: it never ages out while it is
    when = time.time() - 30 * 86400
    os.utime(folder, (when, when))
    assert bytecode.ensure_rank_bytecode() == folder
    assert folder.stat().st_mtime > time.time() - 60


def _config(world: int = 2):
    from sandbox.harness.config import HarnessConfig, StageTimeouts

    return HarnessConfig(problem="all_reduce", world=world, device="cpu", allow_nccl=True, trials=2, iterations=12,
                         warmup=1, timed=False, profile=False,
                         timeouts=StageTimeouts(startup_s=180, build_s=120, correctness_s=90, performance_s=120, profile_s=60))


def test_jailed_ranks_read_the_shared_bytecode_and_write_none_of_it(always):
    with LocalSandbox() as box:
        folder = bytecode.rank_bytecode()
        assert folder is not None  # the sandbox's start compiled it
        before = _files(folder)
        report = evaluate_in(box, READS_THE_SHARED_BYTECODE, _config())
        assert report.status == "correct", (report.message, [log.text()[-2000:] for log in report.logs])
        # the candidate's ranks could not, and the reference's (trusted, reading it too) did not
        assert _files(folder) == before
        assert os.access(folder, os.W_OK)  # writable by the harness's user: it is the jail that keeps ranks out

        poison = hc.load(hc.FIXTURES / "hostile" / "bytecode_cache_poison.py")
        report = evaluate_in(box, poison.source(), _config())
        assert report.status != "correct"
        assert "(good)" in " ".join([report.message, *(log.text() for log in report.logs)]), report.message
        assert _files(folder) == before
