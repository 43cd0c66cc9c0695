"""Builds one torch extension from a JSON spec (run by ``build_extension`` in a confined
subprocess, so a build never shares a process with the harness or the candidate).

``load_inline`` semantics. A spec with CUDA sources and nothing for ``main.cpp`` (no C++
sources, no functions to bind: ParallelKernelBench's style, where the .cu holds its own
``PYBIND11_MODULE``) is built from ``cuda.cu`` alone, written as ``load_inline`` writes it:
``load_inline`` would also compile a ``main.cpp`` holding only ``#include <torch/extension.h>``,
about 20 s of a core on the H200 host beside nvcc's 50 s, for nothing.

nvcc is run through ``nvcc_parallel.py`` (torch's ``PYTORCH_NVCC``), which runs its host and
device front ends at once. ``"torch_extension_h": "slim"`` in a spec puts ``slim_include/`` ahead of
torch's headers: its ``torch/extension.h`` is torch's tensor API and Python casters without the C++
frontend (the caller builds again with torch's own where that is not enough: ``kloop_runtime/build.py``)."""

import json
import os
import shlex
import sys
from pathlib import Path

SLIM_INCLUDE = Path(__file__).with_name("slim_include")
# what load_inline puts ahead of CUDA sources
CUDA_PREAMBLE = ("#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>")


def cuda_only(spec: dict) -> bool:
    """Whether ``spec`` needs no ``main.cpp``: CUDA sources, no C++ sources, no functions to bind."""
    return bool(spec["cuda_sources"]) and not spec["cpp_sources"].strip() and not spec["functions"]


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    build_dir = Path(spec_path).parent
    os.environ["TORCH_CUDA_ARCH_LIST"] = spec.pop("arch_list")
    include_first = [str(SLIM_INCLUDE)] if spec.pop("torch_extension_h", "torch") == "slim" else []
    from torch.utils.cpp_extension import CUDA_HOME, load, load_inline

    if CUDA_HOME:
        os.environ["KLOOP_NVCC"] = os.path.join(CUDA_HOME, "bin", "nvcc")
        os.environ["PYTORCH_NVCC"] = shlex.join([sys.executable, str(Path(__file__).with_name("nvcc_parallel.py"))])

    common = {
        "name": spec["name"],
        "extra_cflags": ["-O3", *spec["extra_cflags"]],
        "extra_cuda_cflags": ["-O3", *spec["extra_cuda_cflags"]],
        "extra_ldflags": spec["extra_ldflags"],
        "extra_include_paths": [*include_first, *spec["extra_include_paths"]],
        "build_directory": str(build_dir),
        "verbose": True,
    }
    if cuda_only(spec):
        source = build_dir / "cuda.cu"
        source.write_text("\n".join([*CUDA_PREAMBLE, spec["cuda_sources"]]))
        load(sources=[str(source)], **common)
    else:
        load_inline(cpp_sources=spec["cpp_sources"], cuda_sources=spec["cuda_sources"] or None,
                    functions=spec["functions"], **common)


if __name__ == "__main__":
    main(sys.argv[1])
