"""``compile_cuda_extension`` with ParallelKernelBench's signature, backed by kernel-loop's runtime.

Same contract as the benchmark's helper: ``cuda_src`` is CUDA C++ that binds its own functions
(``PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)``), and the loaded module is returned. The build
goes through ``kloop_runtime.load_extension`` (cached by content hash; under the harness the
trusted parent compiles), for the running GPU's architecture.

With a torch built without CUDA (CPU tests and demos), a source with no CUDA in it (no kernels,
no launches, no CUDA headers) is built as plain C++; the CUDA-only flags are then dropped except
the ones a C++ compiler shares (-D, -U, -O, -std=, -I). A source that needs CUDA fails to build
there with a message that says so.
"""

from __future__ import annotations

import re

from kloop_runtime import CompileError, load_extension

__all__ = ["compile_cuda_extension"]

_CUDA_MARKERS = re.compile(
    r"__global__|__device__|__shared__|__constant__|<<<|\bcuda[A-Z]\w*\s*\(|"
    r"#\s*include\s*[<\"](?:cuda|cub/|cooperative_groups|ATen/cuda/|c10/cuda/|mma|nvshmem)"
)
_SHARED_FLAGS = ("-D", "-U", "-O", "-std=", "-I")


def needs_cuda(source: str) -> bool:
    """Whether ``source`` uses anything of CUDA (kernels, launches, runtime calls, CUDA headers)."""
    return bool(_CUDA_MARKERS.search(source))


def compile_cuda_extension(
    name: str,
    cuda_src: str,
    extra_cuda_cflags: list[str] | None = None,
    extra_include_paths: list[str] | None = None,
    extra_ldflags: list[str] | None = None,
):
    """Build (cached) and import the extension ``name`` from ``cuda_src``; returns the module."""
    import torch

    include_paths = list(extra_include_paths or [])
    ldflags = list(extra_ldflags or [])
    if torch.version.cuda is None:
        if needs_cuda(cuda_src):
            raise CompileError(f"cannot build {name}: this torch {torch.__version__} has no CUDA, and the source uses CUDA "
                               "(kernels, launches or CUDA headers); run on a machine with a CUDA build of torch")
        cflags = [flag for flag in extra_cuda_cflags or [] if flag.startswith(_SHARED_FLAGS)]
        return load_extension(name, cpp_sources=cuda_src, extra_cflags=cflags, extra_include_paths=include_paths,
                              extra_ldflags=ldflags)
    return load_extension(name, cuda_sources=cuda_src, extra_cuda_cflags=list(extra_cuda_cflags or []),
                          extra_include_paths=include_paths, extra_ldflags=ldflags)
