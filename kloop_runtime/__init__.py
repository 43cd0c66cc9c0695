"""What candidate code may import to compile CUDA and share memory across ranks.

Candidates (and the prompts that teach them) import it under its public name:

    from sandbox import runtime

    kernel = runtime.load_kernel(CUDA_SOURCE, "my_kernel")          # nvcc -> cubin, cached
    kernel(grid=(blocks,), block=(256,), args=(out, x, n))          # on the current stream

    ext = runtime.load_extension("my_ext", cuda_sources=SRC, functions=["run"])  # torch extension
    buf = runtime.SymmetricBuffer((n,), torch.bfloat16)             # peers' pointers in buf.peer_ptrs

Builds are cached by content hash; under the harness, ranks never compile the same source
twice. Compiler errors raise :class:`CompileError` with the whole compiler output.

``kloop_runtime`` is a leaf: it imports only the standard library, torch and filelock, never
the judge (``sandbox``), the problems or the controller. ``sandbox.runtime`` is this same
module (see ``sandbox/runtime.py``, and :mod:`kloop_runtime.compat` for candidate ranks).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from kloop_runtime.build import CompileError, default_arch
from kloop_runtime.channel import compile_artifact

__all__ = ["CompileError", "CudaKernel", "SymmetricBuffer", "compile_cubin", "load_extension", "load_kernel"]


def compile_cubin(source: str, options: tuple[str, ...] | list[str] = (), arch: str | None = None) -> Path:
    """Compile CUDA C++ ``source`` to a cubin (kernels should be ``extern "C"``)."""
    return compile_artifact("cubin", {"source": source, "options": tuple(options), "arch": arch or default_arch()})


@cache
def _module(cubin: Path):
    from kloop_runtime.driver import CudaModule

    return CudaModule(cubin)


def load_kernel(source: str, name: str, options: tuple[str, ...] | list[str] = ()) -> "CudaKernel":
    """Compile (cached) and load kernel ``name`` from ``source``; call it with
    ``kernel(grid, block, args, shared_mem=0, stream=None, cooperative=False)``."""
    return _module(compile_cubin(source, options)).kernel(name)


def load_extension(
    name: str,
    cuda_sources: str = "",
    cpp_sources: str = "",
    functions: list[str] | tuple[str, ...] | None = None,
    extra_cflags: list[str] | tuple[str, ...] = (),
    extra_cuda_cflags: list[str] | tuple[str, ...] = (),
    extra_ldflags: list[str] | tuple[str, ...] = (),
    extra_include_paths: list[str] | tuple[str, ...] = (),
) -> ModuleType:
    """Build (cached) and import a torch C++/CUDA extension, like ``torch.utils.cpp_extension.load_inline``."""
    import torch  # noqa: F401 - the extension links against libtorch

    path = compile_artifact("extension", {
        "name": name, "cuda_sources": cuda_sources, "cpp_sources": cpp_sources,
        "functions": tuple(functions) if functions else None, "extra_cflags": tuple(extra_cflags),
        "extra_cuda_cflags": tuple(extra_cuda_cflags), "extra_ldflags": tuple(extra_ldflags),
        "extra_include_paths": tuple(extra_include_paths), "arch": default_arch(),
    })
    module_name = path.stem
    if module_name in sys.modules:
        return sys.modules[module_name]
    loader = importlib.machinery.ExtensionFileLoader(module_name, str(path))
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[module_name] = module
    return module


def __getattr__(name: str):
    if name == "CudaKernel":
        from kloop_runtime.driver import CudaKernel

        return CudaKernel
    if name == "SymmetricBuffer":
        from kloop_runtime.symmetric import SymmetricBuffer

        return SymmetricBuffer
    raise AttributeError(name)
