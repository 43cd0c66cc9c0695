"""Builds one torch extension from a JSON spec (run by ``build_extension`` in a confined
subprocess, so a build never shares a process with the harness or the candidate)."""

import json
import os
import sys
from pathlib import Path


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    build_dir = Path(spec_path).parent
    os.environ["TORCH_CUDA_ARCH_LIST"] = spec.pop("arch_list")
    from torch.utils.cpp_extension import load_inline

    load_inline(
        name=spec["name"],
        cpp_sources=spec["cpp_sources"],
        cuda_sources=spec["cuda_sources"] or None,
        functions=spec["functions"],
        extra_cflags=["-O3", *spec["extra_cflags"]],
        extra_cuda_cflags=["-O3", *spec["extra_cuda_cflags"]],
        extra_ldflags=spec["extra_ldflags"],
        extra_include_paths=spec["extra_include_paths"],
        build_directory=str(build_dir),
        verbose=True,
    )


if __name__ == "__main__":
    main(sys.argv[1])
