"""A torch extension's cold build, laid out as ``load_inline`` lays it out (a ``main.cpp`` holding
only ``#include <torch/extension.h>`` beside ``cuda.cu``) and as kloop's builder builds a CUDA
source that binds its own module (``cuda.cu`` alone), that one with nvcc's front ends at once
(``kloop_runtime/nvcc_parallel.py``, the builder's default) and with plain nvcc, side by side in
one run: each build in a fresh folder, run as kloop runs it (``kloop_runtime/extension_builder.py``,
here unconfined), with its wall time and ninja's edges; kloop's with its slim ``torch/extension.h``
(a build's first try, ``kloop_runtime/slim_include``) and with torch's own. ``--phases`` adds nvcc's
own phases of ``cuda.cu`` (``nvcc --time``), compiled once more on its own.

The source is what a ParallelKernelBench-style solution hands to ``compile_cuda_extension``
(the call is captured, not run; default: benchmarks/candidates/pkb_allreduce_copy_cuda.py). With a
torch built without CUDA there is no ``cuda.cu`` to build: a C++ extension of the same shape is
built, with either header.

    python benchmarks/extension_build.py --phases [--kloop-only]   # on the GPU machine
    python benchmarks/extension_build.py --repeats 1 --no-warm-up  # on a CPU
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from paths import ROOT
from table import print_table

BUILDER = ROOT / "kloop_runtime" / "extension_builder.py"
CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) { return x * 2; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); }
"""
# load_inline's layout for a source that binds its own module: a main.cpp with only its implicit include (a comment
# adds nothing to compile, and makes kloop's builder keep that layout)
INLINE_MAIN_CPP = "// main.cpp: load_inline's implicit #include <torch/extension.h> and nothing else"


class _Captured(Exception):
    pass


def captured_extension(candidate: Path) -> dict:
    """The arguments of the candidate's ``compile_cuda_extension`` call, the call itself not run."""
    found: dict = {}

    def compile_cuda_extension(name, cuda_src, extra_cuda_cflags=None, extra_include_paths=None, extra_ldflags=None):
        found.update(name=name, source=cuda_src, cuda_cflags=list(extra_cuda_cflags or []),
                     include_paths=list(extra_include_paths or []), ldflags=list(extra_ldflags or []))
        raise _Captured

    helpers = types.ModuleType("utils.cuda_helpers")
    helpers.compile_cuda_extension = compile_cuda_extension
    utils = types.ModuleType("utils")
    utils.cuda_helpers = helpers
    saved = {name: sys.modules.get(name) for name in ("utils", "utils.cuda_helpers")}
    sys.modules.update({"utils": utils, "utils.cuda_helpers": helpers})
    try:
        runpy.run_path(str(candidate))
    except _Captured:
        pass
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    if not found:
        raise SystemExit(f"{candidate} builds no extension through compile_cuda_extension")
    return found


PLAIN_NVCC = {"KLOOP_PARALLEL_NVCC": "0"}
KLOOP_LAYOUT = "kloop (cuda.cu alone)"
TORCH_HEADER = "torch's extension.h"


def specs(extension: dict, cuda: bool) -> dict[str, tuple[dict, dict]]:
    """The builder's spec and environment of each layout to time (a C++ extension, without CUDA): kloop's slim
    torch/extension.h (its builds' first try) and torch's own."""
    from kloop_runtime.build import arch_list_entry, default_arch

    base = {"functions": None, "extra_cflags": [], "extra_ldflags": extension["ldflags"],
            "extra_include_paths": extension["include_paths"], "arch_list": arch_list_entry(default_arch())}
    if not cuda:
        cpp = {**base, "name": "bench_cpp", "cpp_sources": CPP_SOURCE, "cuda_sources": "", "extra_cuda_cflags": []}
        return {"C++ (main.cpp)": ({**cpp, "torch_extension_h": "slim"}, {}),
                f"C++ (main.cpp), {TORCH_HEADER}": ({**cpp, "name": "bench_cpp_torch_header", "torch_extension_h": "torch"}, {})}
    cuda_spec = {**base, "cuda_sources": extension["source"], "extra_cuda_cflags": extension["cuda_cflags"], "cpp_sources": ""}
    return {"load_inline (main.cpp + cuda.cu)": ({**cuda_spec, "name": "bench_inline", "cpp_sources": INLINE_MAIN_CPP,
                                                  "torch_extension_h": "torch"}, {}),
            f"{KLOOP_LAYOUT}, {TORCH_HEADER}": ({**cuda_spec, "name": "bench_torch_header", "torch_extension_h": "torch"}, {}),
            f"{KLOOP_LAYOUT}, plain nvcc": ({**cuda_spec, "name": "bench_plain_nvcc", "torch_extension_h": "slim"}, PLAIN_NVCC),
            KLOOP_LAYOUT: ({**cuda_spec, "name": "bench_cuda_only", "torch_extension_h": "slim"}, {})}


def build(spec: dict, env: dict, folder: Path) -> dict:
    """One cold build in ``folder``: wall seconds, ninja's edges (output, start s, end s), how nvcc
    ran (nvcc_parallel.py's line), exit code and log tail."""
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps(spec))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(BUILDER), str(folder / "spec.json")], capture_output=True, text=True, check=False,
                          env={**os.environ, **env})
    wall = time.monotonic() - started
    edges = []
    log = folder / ".ninja_log"
    for line in (log.read_text().splitlines()[1:] if log.exists() else []):
        fields = line.split("\t")
        if len(fields) >= 4 and fields[0].isdigit() and fields[1].isdigit():
            edges.append((fields[3], int(fields[0]) / 1000, int(fields[1]) / 1000))
    nvcc = re.findall(r"kloop nvcc: (.*)", proc.stdout + proc.stderr)
    return {"wall_s": wall, "edges": edges, "nvcc": "; ".join(nvcc) or "plain", "exit": proc.returncode,
            "log": (proc.stdout + proc.stderr)[-1500:]}


def nvcc_phases(folder: Path) -> list[list]:
    """nvcc's phases of ``folder``'s cuda.cu, compiled once more with its build.ninja's flags."""
    from kloop_runtime.build import find_nvcc

    ninja = (folder / "build.ninja").read_text()

    def variable(name: str) -> str:
        found = re.search(rf"^{name} = (.*)$", ninja, re.MULTILINE)
        return found.group(1) if found else ""

    times = folder / "phases.csv"
    command = (f"{shlex.quote(find_nvcc())} {variable('cuda_cflags')} -c {shlex.quote(str(folder / 'cuda.cu'))} "
               f"-o {shlex.quote(str(folder / 'again.o'))} {variable('cuda_post_cflags')} --time {shlex.quote(str(times))}")
    subprocess.run(command, shell=True, cwd=folder, capture_output=True, check=False)
    rows = []
    for line in times.read_text().splitlines()[1:] if times.exists() else []:
        fields = [field.strip() for field in line.split(",")]
        if len(fields) >= 8:  # source, phase, inputs, output, arch, tool, metric, unit
            rows.append([fields[1], round(float(fields[-2]) / (1000 if fields[-1] == "ms" else 1), 2)])
    return rows


def _edges_text(edges: list[tuple[str, float, float]]) -> str:
    return ", ".join(f"{Path(name).name} {start:.1f}-{end:.1f}" for name, start, end in edges)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidate", type=Path, default=ROOT / "benchmarks/candidates/pkb_allreduce_copy_cuda.py",
                        help="a solution that calls compile_cuda_extension at import")
    parser.add_argument("--repeats", type=int, default=2, help="cold builds of each layout, the order alternating")
    parser.add_argument("--no-warm-up", action="store_true", help="skip the untimed first build (it fills the page cache)")
    parser.add_argument("--phases", action="store_true", help="also nvcc's own phases of cuda.cu (needs CUDA)")
    parser.add_argument("--kloop-only", action="store_true", help="only kloop's layout, nvcc's front ends at once and plain")
    args = parser.parse_args(argv)
    if not args.candidate.is_file():
        parser.error(f"no such candidate: {args.candidate}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    import torch

    cuda = torch.version.cuda is not None
    layouts = specs(captured_extension(args.candidate), cuda)
    if args.kloop_only and cuda:
        layouts = {name: layout for name, layout in layouts.items() if name.startswith(KLOOP_LAYOUT)}
    if not cuda:
        print(f"torch {torch.__version__} has no CUDA: a C++ extension of the same shape is built, with either header")
    rows, walls = [], {name: [] for name in layouts}
    with tempfile.TemporaryDirectory(prefix="extension-build-") as tmp:
        root = Path(tmp)
        if not args.no_warm_up:
            warm = build(*next(iter(layouts.values())), root / "warm-up")
            print(f"warm-up build (untimed): {warm['wall_s']:.1f} s, exit {warm['exit']}", flush=True)
        for repeat in range(1, args.repeats + 1):
            order = list(layouts) if repeat % 2 else list(reversed(layouts))
            for name in order:
                spec, env = layouts[name]
                result = build(spec, env, root / f"{repeat}-{spec['name']}")
                if result["exit"] != 0:
                    print(f"{name}: the build failed (exit {result['exit']}):\n{result['log']}", file=sys.stderr)
                    return 1
                walls[name].append(result["wall_s"])
                rows.append([name, repeat, round(result["wall_s"], 1), result["nvcc"], _edges_text(result["edges"])])
                print(f"{name}, build {repeat}: {result['wall_s']:.1f} s", flush=True)
        title = (f"cold builds of {args.candidate.name}'s extension: torch {torch.__version__}, "
                 f"{os.cpu_count()} CPUs (edges: ninja's, seconds from the build's start)")
        print_table(title, ["layout", "build", "wall_s", "nvcc", "edges"], rows)
        print_table("per layout", ["layout", "median_s", "min_s"],
                    [[name, round(statistics.median(times), 1), round(min(times), 1)] for name, times in walls.items()])
        if args.phases:
            if not cuda:
                print("no nvcc phases: this torch has no CUDA")
            else:
                folder = root / f"1-{layouts[KLOOP_LAYOUT][0]['name']}"
                print_table("nvcc's phases of cuda.cu, compiled once more on its own", ["phase", "s"], nvcc_phases(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
