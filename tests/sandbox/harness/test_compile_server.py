"""The parent's compile server with real nvcc: macros cannot smuggle multicast past the check on
the preprocessed source, and honest sources that use macros (the oracles do) still build."""

import importlib.util
import os
from pathlib import Path

from kloop_runtime import build
from sandbox.harness import compile_server
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


def _fake_compiler(monkeypatch, sizes: dict[str, int]):
    """nvcc replaced by a build that leaves a (sparse) kernel.cubin of the size its source names."""
    def run(cmd, build_dir, what, confine, extra_read=()):
        source = (Path(build_dir) / "kernel.cu").read_text()
        with open(Path(build_dir) / "kernel.cubin", "wb") as handle:
            handle.truncate(sizes[source])
        return ""
    monkeypatch.setattr(build, "_run_compiler", run)


def test_an_artifact_over_the_limit_never_enters_the_cache(tmp_path, monkeypatch):
    """HOSTILE: a build whose artifact is 300 MiB (a `.fill` of inline assembly makes one in two
    seconds) was moved into the cache, which outlives the evaluation, and kept for good. Control:
    one of 1 MiB is built and delivered."""
    _fake_compiler(monkeypatch, {"// big": 300 * 2**20, "// small": 2**20})
    compile_server = server(tmp_path)
    big = compile_server.build("cubin", {"source": "// big", "options": [], "arch": "90a"})
    assert not big.ok and "at most 256 MiB" in big.log
    small = compile_server.build("cubin", {"source": "// small", "options": [], "arch": "90a"})
    assert small.ok and Path(small.path).stat().st_size == 2**20
    assert [p.stat().st_size for p in (tmp_path / "cache").glob("*.cubin")] == [2**20]


def test_one_evaluation_may_add_only_so_much_to_the_cache(tmp_path, monkeypatch):
    """HOSTILE: builds without number, each a new key (a timestamp in a comment), grew the cache by
    what they made, every evaluation. Now MAX_BUILT_BYTES of new artifacts and MAX_BUILDS requests."""
    sources = {f"// {i}": 200 * 2**20 for i in range(3)} | {f"// tiny {i}": 4096 for i in range(compile_server.MAX_BUILDS)}
    _fake_compiler(monkeypatch, sources)
    judge = server(tmp_path)
    results = [judge.build("cubin", {"source": f"// {i}", "options": [], "arch": "90a"}) for i in range(3)]
    assert [r.ok for r in results] == [True, True, False] and "more than 512 MiB" in results[2].log
    assert sum(p.stat().st_size for p in (tmp_path / "cache").glob("*.cubin")) == 400 * 2**20
    tiny = [judge.build("cubin", {"source": f"// tiny {i}", "options": [], "arch": "90a"}) for i in range(compile_server.MAX_BUILDS)]
    assert not tiny[-1].ok and f"at most {compile_server.MAX_BUILDS} distinct builds" in tiny[-1].log
    assert all(r.ok for r in tiny[:compile_server.MAX_BUILDS - 3])
    assert judge.build("cubin", {"source": "// 0", "options": [], "arch": "90a"}).ok  # asked again: the same answer


def test_the_cache_keeps_to_its_budget_least_recently_used_first(tmp_path, monkeypatch):
    """Each evaluation's compile server prunes the cache after a build: an entry found again (a
    cache hit) counts as used, so the one neither built nor found since goes first."""
    monkeypatch.setenv("KLOOP_COMPILE_CACHE_GIB", str(600 * 1024 / 2**30))  # 600 KiB
    _fake_compiler(monkeypatch, {"// a": 250 * 1024, "// b": 250 * 1024, "// c": 250 * 1024})
    secret = os.urandom(32)

    def judge(source):
        (tmp_path / "deliver").mkdir(exist_ok=True)
        return CompileServer(tmp_path / "cache", secret, tmp_path / "deliver").build("cubin", {"source": source, "options": [], "arch": "90a"})

    a, b = judge("// a"), judge("// b")
    assert a.ok and b.ok
    assert judge("// a").ok  # found: used now
    assert judge("// c").ok  # 750 KiB: one must go, and b was used longest ago
    kept = sorted(p.name for p in (tmp_path / "cache").glob("*.cubin"))
    assert len(kept) == 2 and Path(b.path).name not in kept and Path(a.path).name in kept
