"""benchmarks/extension_build.py: the candidate's extension captured, not built by it; the
layouts it times are the ones the builder tells apart, kloop's with nvcc's front ends at once and
with plain nvcc, with kloop's slim torch/extension.h and torch's own; on CPU a cold C++ build with
either header, with ninja's edges."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


def test_the_layouts_are_load_inlines_and_the_builders():
    sys.path.insert(0, str(BENCH))
    from extension_build import captured_extension, specs

    from kloop_runtime.extension_builder import cuda_only

    before = sys.modules.get("utils")
    extension = captured_extension(BENCH / "candidates" / "pkb_allreduce_copy_cuda.py")
    assert extension["name"] == "pkb_allreduce_copy" and "PYBIND11_MODULE" in extension["source"]
    assert extension["cuda_cflags"] == ["-O3"]
    assert sys.modules.get("utils") is before  # the stand-in it captured through is gone
    layouts = specs(extension, cuda=True)
    assert {name: (cuda_only(spec), spec["torch_extension_h"], env) for name, (spec, env) in layouts.items()} == {
        "load_inline (main.cpp + cuda.cu)": (False, "torch", {}), "kloop (cuda.cu alone)": (True, "slim", {}),
        "kloop (cuda.cu alone), torch's extension.h": (True, "torch", {}),
        "kloop (cuda.cu alone), plain nvcc": (True, "slim", {"KLOOP_PARALLEL_NVCC": "0"})}
    assert {spec["cuda_sources"] for spec, _ in layouts.values()} == {extension["source"]}


def test_a_cold_cpu_build_prints_its_edges():
    result = subprocess.run([sys.executable, str(BENCH / "extension_build.py"), "--repeats", "1", "--no-warm-up"], cwd=REPO,
                            capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    rows = {line.split("|")[0].strip(): line for line in result.stdout.splitlines() if "|     1 " in line}
    assert "main.o 0.0-" in rows["C++ (main.cpp)"] and "bench_cpp.so" in rows["C++ (main.cpp)"]
    assert "bench_cpp_torch_header.so" in rows["C++ (main.cpp), torch's extension.h"]
    assert "per layout" in result.stdout
