"""Compiling CUDA: nvcc to cubin and torch extensions, cached by content hash.

A build is keyed by everything that changes its output (source, options, target, compiler
version); the result lands atomically in the cache under that key, and a file lock per key
means concurrent ranks never compile the same source twice. Compiler output is kept whole for
feedback.

The cache is bounded: an artifact may be at most ``MAX_ARTIFACT_BYTES``, and :func:`prune_cache`
removes the least recently used entries (a cache hit counts as a use) past a budget, which the
judge applies after every build it makes (a candidate's builds are hostile: two 256 MiB ``.so``
files a build, with a timestamp in a comment, grew the cache by half a GB an evaluation, for good).

Compilers run as the caller's ``confine`` says. The judge, which compiles hostile sources and
flags, passes one that runs each build in a jail (an unprivileged uid, no network, the build
folder its only writable one), so a hostile ``#include`` cannot pull a user's files into the
compiler log, nor a flag run commands as the judge; without one (a solution run by hand, outside
the harness) the compiler runs as it is. The runtime never imports the judge.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Callable, Sequence

from filelock import FileLock, Timeout

from kloop_runtime.settings import compile_cache_dir
from kloop_runtime.tree_removal import remove_tree

COMPILE_TIMEOUT_S = 600
MAX_ARTIFACT_BYTES = 256 * 2**20  # an extension of many kernels for several GPUs is tens of MB
# confine(cmd, build_dir, extra_read) -> the command line that runs compiler ``cmd`` writing only
# under ``build_dir`` and reading system folders and ``extra_read``.
Confine = Callable[[list[str], Path, Sequence[str]], list[str]]
NVCC_OPTIONS_ALLOWED = (
    "-D", "-U", "-O", "-std=", "--std=", "-use_fast_math", "--use_fast_math", "-lineinfo", "-maxrregcount",
    "--maxrregcount", "-Xptxas", "--ptxas-options", "--expt-relaxed-constexpr", "--expt-extended-lambda",
    "--extended-lambda", "-ftz", "-prec-div", "-prec-sqrt", "-fmad", "--restrict", "-res-usage", "--resource-usage",
    "-G", "-g",
)


# What a source gets from the slim torch/extension.h where it uses more of torch's C++ API (nvcc's front ends' words,
# then g++'s): it is built again with torch's own. A syntax error is not (it fails alike either way).
MISSING_NAME = re.compile(r"is undefined|has no member|must be a class or namespace name|is not a template|no instance of|"
                          r"incomplete type|was not declared|is not a member of|has not been declared|does not name a|"
                          r"no matching function|no template named|no member named")


class CompileError(RuntimeError):
    """The compiler rejected the source; ``log`` holds its whole output."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message if not log else f"{message}\n{log}")
        self.log = log or message


@cache
def find_nvcc() -> str:
    candidates = [os.environ.get("NVCC")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(os.path.join(home, "bin", "nvcc"))
    candidates.append(shutil.which("nvcc"))
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise CompileError("nvcc was not found: install the CUDA toolkit or set CUDA_HOME (or NVCC) to it")


@cache
def nvcc_version() -> str:
    out = subprocess.run([find_nvcc(), "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"release [\d.]+, V[\d.]+", out)
    return match.group(0) if match else out.strip()[-80:]


def normalize_arch(arch: str) -> str:
    """'sm_90a', '90a', '9.0' -> '90a'."""
    arch = arch.strip().lower().removeprefix("sm_").removeprefix("compute_").replace(".", "")
    if not re.fullmatch(r"\d{2,3}[af]?", arch):
        raise CompileError(f"unknown CUDA architecture {arch!r}: expected something like sm_90a")
    return arch


def arch_list_entry(arch: str) -> str:
    """'90a' -> '9.0a', the spelling of TORCH_CUDA_ARCH_LIST."""
    major, minor, suffix = re.fullmatch(r"(\d+)(\d)([af]?)", normalize_arch(arch)).groups()
    return f"{major}.{minor}{suffix}"


def default_arch() -> str:
    """The running GPU's architecture (with Hopper's 'a' features), else KLOOP_CUDA_ARCH or sm_90a."""
    if os.environ.get("KLOOP_CUDA_ARCH"):
        return normalize_arch(os.environ["KLOOP_CUDA_ARCH"])
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"{major}{minor}" + ("a" if major >= 9 else "")
    except Exception:  # noqa: BLE001 - any failure means "no usable GPU here"
        pass
    return "90a"


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def allowed_options(options: Sequence[str]) -> tuple[str, ...]:
    """``options`` as strings; CompileError when one does not start with an allowed prefix."""
    options = tuple(str(o) for o in options)
    for option in options:
        if not option.startswith(NVCC_OPTIONS_ALLOWED):
            raise CompileError(f"nvcc option {option!r} is not allowed; allowed prefixes: {' '.join(NVCC_OPTIONS_ALLOWED)}")
    return options


def _built_once(cache_dir: Path, key: str, target: Path, build: Callable[[Path], None],
                on_built: Callable[[Path], None] | None = None) -> Path:
    """``target``, made by ``build(build_dir)`` in a fresh folder under a file lock for ``key``
    unless it is there already (another process may have built it while this one waited).
    ``on_built(target)`` runs under the lock when this call built it, never on a cache hit.
    Only a plain file counts: a build that leaves a link (to a file it could not read, which its
    caller would then read for it) fails, and a link in the cache is built over."""
    if _plain_file(target):
        _touch(target)
        return target
    with FileLock(str(cache_dir / f"{key}.lock")):
        if not _plain_file(target):
            remove_tree(target)
            build_dir = Path(tempfile.mkdtemp(prefix="build-", dir=cache_dir))
            try:
                build(build_dir)
            finally:
                remove_tree(build_dir)
            if on_built is not None:
                on_built(target)
    return target


def _take(artifact: Path, target: Path) -> None:
    """Move a build's ``artifact`` to ``target`` in the cache: only a plain file of at most
    MAX_ARTIFACT_BYTES (anything else the build left in its place stays where it is, and goes with
    the build folder)."""
    if not _plain_file(artifact):
        raise CompileError(f"the build left {artifact.name} as a folder, a link or a special file, not a plain file")
    size = artifact.stat().st_size
    if size > MAX_ARTIFACT_BYTES:
        raise CompileError(f"the build's {artifact.name} is {size / 2**20:.0f} MiB; an artifact may be at most "
                           f"{MAX_ARTIFACT_BYTES / 2**20:.0f} MiB")
    os.replace(artifact, target)


def _touch(path: Path) -> None:
    """Mark a cache entry used now (prune_cache removes the least recently used first)."""
    try:
        os.utime(path)
    except OSError:
        pass


def prune_cache(cache_dir: Path, max_bytes: int) -> int:
    """Remove the least recently used entries of the compile cache (an artifact with its seal,
    by the time it was built or last found) until it holds at most ``max_bytes``; an entry being
    built (its lock held) is left alone. Lock files of entries that hold nothing (failed builds)
    go too once an hour old. Returns the bytes removed."""
    entries = []
    for lock in cache_dir.glob("*.lock"):
        key = lock.name.removesuffix(".lock")
        paths = [p for p in (cache_dir / f"{key}.cubin", cache_dir / f"{key}.cubin.hmac", cache_dir / f"ext-{key}") if os.path.lexists(p)]
        files = [f for p in paths for f in ([p] if not p.is_dir() or p.is_symlink() else list(p.iterdir()))]
        try:
            size = sum(f.lstat().st_size for f in files)
            used = max([f.lstat().st_mtime for f in files] or [lock.lstat().st_mtime])
        except OSError:
            continue  # removed meanwhile
        entries.append((used, size, paths, lock))
    total = sum(size for _, size, _, _ in entries)
    removed = 0
    stale = time.time() - 3600
    for used, size, paths, lock in sorted(entries, key=lambda entry: entry[0]):
        if total <= max_bytes and (paths or used > stale):
            continue
        try:
            with FileLock(str(lock), timeout=0):
                for path in paths:
                    remove_tree(path)
                lock.unlink(missing_ok=True)
        except Timeout:
            continue
        total -= size
        removed += size
    return removed


def read_plain_file(path: Path, max_bytes: int = MAX_ARTIFACT_BYTES) -> bytes:
    """The bytes of the build's ``path``, read without following a link and without waiting on a
    pipe, refused unless it is a regular file: a build runs hostile code, and the caller reading
    what it left is the judge (a link to the host secret was sealed and delivered; a FIFO hung it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise CompileError(f"the build's {path.name} could not be read: {error.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            raise CompileError(f"the build's {path.name} is not a regular file of at most {max_bytes} bytes")
        return handle.read(max_bytes)


def _plain_file(path: Path) -> bool:
    """A regular file with one name (never a symlink or a hard link), however it was made."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def _run_compiler(cmd: list[str], build_dir: Path, what: str, confine: Confine | None, extra_read: Sequence[str] = ()) -> str:
    try:
        proc = subprocess.run(  # confined, the jail starts the command in build_dir; the confining process must not (python -m)
            confine(cmd, build_dir, extra_read) if confine else cmd, cwd="/" if confine else build_dir, capture_output=True, text=True,
            timeout=COMPILE_TIMEOUT_S, env={**os.environ, "TMPDIR": str(build_dir)},
        )
    except subprocess.TimeoutExpired as expired:
        raise CompileError(f"{what} took longer than {COMPILE_TIMEOUT_S} s", str(expired.stdout or "")) from None
    output = (proc.stdout + proc.stderr).replace(str(build_dir) + "/", "")
    if proc.returncode != 0:
        raise CompileError(f"{what} failed (exit {proc.returncode})", output)
    return output


def build_cubin(source: str, options: tuple[str, ...] = (), arch: str | None = None, cache_dir: Path | None = None,
                confine: Confine | None = None, on_built: Callable[[Path], None] | None = None) -> Path:
    """Compile ``source`` with nvcc to a cubin for ``arch``; returns the cached file (``on_built``:
    see :func:`_built_once`)."""
    arch = normalize_arch(arch or default_arch())
    options = allowed_options(options)
    cache_dir = cache_dir or compile_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = _key("cubin", source, options, arch, nvcc_version())
    target = cache_dir / f"{key}.cubin"

    def compile_in(build_dir: Path) -> None:
        (build_dir / "kernel.cu").write_text(source)
        cmd = [find_nvcc(), "-cubin", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-O3", "-std=c++17",
               "-lineinfo", *options, "-o", "kernel.cubin", "kernel.cu"]
        _run_compiler(cmd, build_dir, "nvcc", confine)
        _take(build_dir / "kernel.cubin", target)

    return _built_once(cache_dir, key, target, compile_in, on_built)


def preprocess_cuda(source: str, options: tuple[str, ...] = (), cache_dir: Path | None = None, confine: Confine | None = None) -> str:
    """``source`` after nvcc's preprocessor (macros expanded, includes inlined), for checks that
    must see what the compiler will see; built in a scratch folder, nothing cached."""
    options = allowed_options(options)
    cache_dir = cache_dir or compile_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    build_dir = Path(tempfile.mkdtemp(prefix="preprocess-", dir=cache_dir))
    try:
        (build_dir / "kernel.cu").write_text(source)
        _run_compiler([find_nvcc(), "-E", "-std=c++17", *options, "-o", "kernel.ii", "kernel.cu"], build_dir, "nvcc -E", confine)
        return read_plain_file(build_dir / "kernel.ii").decode(errors="replace")
    finally:
        remove_tree(build_dir)


def build_extension_in(build_dir: Path, spec: dict, confine: Confine | None = None) -> tuple[str, Path]:
    """Build the extension ``spec`` describes (``extension_builder.py``'s spec) in a new folder of
    ``build_dir``: with kloop's slim ``torch/extension.h`` first, again with torch's own where the
    compiler's errors say a name was missing (a source using torch's C++ frontend: nn, optim,
    autograd functions). Which one built it (``slim`` or ``torch``) and the folder the module is in;
    CompileError with the last build's log. Each attempt has a folder of its own: the first ran the
    candidate's code (a flag, a constructor run at import), and a second in the same folder wrote its
    spec through a link the first left there and started its jail from a folder holding a planted
    ``sandbox`` package (tests/fixtures/hostile/compile_retry_*)."""
    import torch

    builder = Path(__file__).with_name("extension_builder.py")  # run by path: it imports nothing of ours
    read = [str(Path(torch.__file__).parent), str(builder.parent)]

    def build(headers: str) -> tuple[str, Path]:
        folder = build_dir / headers
        folder.mkdir()
        (folder / "spec.json").write_text(json.dumps({**spec, "torch_extension_h": headers}))
        _run_compiler([sys.executable, str(builder), str(folder / "spec.json")], folder, "extension build", confine,
                      extra_read=read)
        return headers, folder

    try:
        return build("slim")
    except CompileError as error:
        if not MISSING_NAME.search(error.log):
            raise
    return build("torch")


def build_extension(
    name: str,
    cuda_sources: str = "",
    cpp_sources: str = "",
    functions: tuple[str, ...] | None = None,
    extra_cflags: tuple[str, ...] = (),
    extra_cuda_cflags: tuple[str, ...] = (),
    extra_ldflags: tuple[str, ...] = (),
    extra_include_paths: tuple[str, ...] = (),
    arch: str | None = None,
    cache_dir: Path | None = None,
    confine: Confine | None = None,
    on_built: Callable[[Path], None] | None = None,
) -> Path:
    """Build a torch C++/CUDA extension (``load_inline`` semantics); returns the cached .so."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise CompileError(f"extension name {name!r} must be a Python identifier")
    arch = normalize_arch(arch or default_arch())
    cache_dir = cache_dir or compile_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    import torch

    spec = dict(cuda_sources=cuda_sources, cpp_sources=cpp_sources, functions=list(functions) if functions else None,
                extra_cflags=list(extra_cflags), extra_cuda_cflags=list(extra_cuda_cflags),
                extra_ldflags=list(extra_ldflags), extra_include_paths=list(extra_include_paths))
    key = _key("extension", name, spec, arch, torch.__version__, nvcc_version() if cuda_sources else "")
    module_name = f"{name}_{key[:12]}"
    target = cache_dir / f"ext-{key}" / f"{module_name}.so"

    def compile_in(build_dir: Path) -> None:
        _, folder = build_extension_in(build_dir, {**spec, "name": module_name, "arch_list": arch_list_entry(arch)}, confine)
        target.parent.mkdir(exist_ok=True)
        _take(folder / f"{module_name}.so", target)

    return _built_once(cache_dir, key, target, compile_in, on_built)
