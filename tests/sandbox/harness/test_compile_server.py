"""The parent's compile server with real nvcc: macros cannot smuggle multicast past the check on
the preprocessed source, and honest sources that use macros (the oracles do) still build."""

import importlib.util
import os
from pathlib import Path

from kloop_runtime import build
from sandbox.harness.compile_server import CompileServer

ROOT = Path(__file__).resolve().parents[3]


def server(tmp_path: Path) -> CompileServer:
    (tmp_path / "deliver").mkdir(parents=True)
    return CompileServer(tmp_path / "cache", os.urandom(32), tmp_path / "deliver")


def oracle_source(problem: str) -> str:
    spec = importlib.util.spec_from_file_location("oracle", ROOT / f"problems/collective/{problem}/oracle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SOURCE


def test_an_oracle_with_macros_builds(tmp_path):
    source = oracle_source("all_gather")
    assert "#define" in source  # the case this test is about
    result = server(tmp_path).build("cubin", {"source": source, "options": [], "arch": "90a"})
    assert result.ok, result.log
    assert Path(result.path).is_file() and Path(result.path).stat().st_size > 0


def test_multicast_pasted_by_a_macro_is_refused(tmp_path):
    hostile = ('#define GLUE(a, b) a##b\n#define OP GLUE(mult, imem.ld_reduce.add.f32)\n#define STR(x) #x\n#define XSTR(x) STR(x)\n'
               '__global__ void k(float* out, float* p) { float v; asm volatile(XSTR(OP) " %0, [%1];" : "=f"(v) : "l"(p)); *out = v; }\n')
    assert "multimem" not in hostile
    result = server(tmp_path).build("cubin", {"source": hostile, "options": [], "arch": "90a"})
    assert not result.ok and "multimem" in result.log.lower() and "preprocessed" in result.log


def test_a_kernel_is_compiled_once_and_a_foreign_cache_entry_again(tmp_path, monkeypatch):
    runs = []
    real = build._run_compiler
    monkeypatch.setattr(build, "_run_compiler", lambda *args, **kwargs: runs.append(args[2]) or real(*args, **kwargs))
    payload = {"source": "__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n", "options": [], "arch": "90a"}
    (tmp_path / "deliver").mkdir()
    secret = os.urandom(32)
    assert CompileServer(tmp_path / "cache", secret, tmp_path / "deliver").build("cubin", payload).ok
    assert runs == ["nvcc"]  # built once (it was built twice: the fresh artifact failed its own seal check)
    assert CompileServer(tmp_path / "cache", secret, tmp_path / "deliver").build("cubin", payload).ok
    assert runs == ["nvcc"]  # a sealed cache hit
    assert CompileServer(tmp_path / "cache", os.urandom(32), tmp_path / "deliver").build("cubin", payload).ok
    assert runs == ["nvcc", "nvcc"]  # sealed under another secret: not trusted, built again


def test_the_preprocessed_check_runs_once_per_source_in_a_harness(tmp_path, monkeypatch):
    """A long-lived harness judges the same kernel again and again: the confined ``nvcc -E`` of
    a source with macros runs for its first evaluation only, and a source refused once is
    refused again (from what was kept), each evaluation with a compile server of its own."""
    runs = []
    real = build._run_compiler
    monkeypatch.setattr(build, "_run_compiler", lambda *args, **kwargs: runs.append(args[2]) or real(*args, **kwargs))
    unique = f"// {os.urandom(8).hex()}\n"  # kept per process: a source no other test checked
    honest = unique + "__global__ void k(float* x) {\n#pragma unroll\n  for (int i = 0; i < 4; ++i) x[i] += 1.0f;\n}\n"
    hostile = unique + ('#define GLUE(a, b) a##b\n#define OP GLUE(mult, imem.ld_reduce.add.f32)\n#define STR(x) #x\n'
                        '#define XSTR(x) STR(x)\n__global__ void k(float* out, float* p) { float v; '
                        'asm volatile(XSTR(OP) " %0, [%1];" : "=f"(v) : "l"(p)); *out = v; }\n')
    for evaluation in range(3):
        assert server(tmp_path / f"eval-{evaluation}").build("cubin", {"source": honest, "options": [], "arch": "90a"}).ok
        refused = server(tmp_path / f"eval-{evaluation}-hostile").build("cubin", {"source": hostile, "options": [], "arch": "90a"})
        assert not refused.ok and "multimem" in refused.log.lower() and "preprocessed" in refused.log
    assert runs.count("nvcc -E") == 2  # once per source, not once per evaluation
