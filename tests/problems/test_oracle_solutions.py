"""The oracle solutions on CPU: each is a valid candidate (static checks), each CUDA source in it
compiles for sm_90a with nvcc, and each has the ``TRAILING_BARRIER`` switch the GPU tests flip.
Their behaviour on a GPU is tested in ``test_oracle_solutions_gpu.py``."""

import ast

import pytest

from problems import all_problems, get_problem
from sandbox.harness.static_checks import check_source
from kloop_runtime.build import CompileError, build_cubin, find_nvcc

REQUIRED = ("all_reduce", "all_gather", "all_to_all", "all_gather_gemm", "gemm_reduce_scatter", "ring_attention")
ORACLES = sorted(p.name for p in all_problems() if p.oracle_path is not None)


def oracle_source(name: str) -> str:
    path = get_problem(name).oracle_path
    assert path is not None, f"problem {name} has no oracle.py"
    return path.read_text()


def cuda_sources(source: str) -> list[str]:
    """Every string constant of the module that holds a CUDA kernel."""
    return [node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value]


def test_the_required_oracles_exist():
    assert set(REQUIRED) <= set(ORACLES)


@pytest.mark.parametrize("name", ORACLES)
def test_oracle_passes_the_static_checks(name):
    verdict = check_source(oracle_source(name), "oracle.py")
    assert verdict.status == "ok", verdict.message


@pytest.mark.parametrize("name", ORACLES)
def test_oracle_documents_itself_and_has_one_trailing_barrier_switch(name):
    source = oracle_source(name)
    tree = ast.parse(source)
    docstring = ast.get_docstring(tree) or ""
    assert len(docstring) > 500 and "TRAILING_BARRIER" in docstring, "the docstring explains mechanism and synchronisation"
    assert source.count("TRAILING_BARRIER = True") == 1  # the GPU tests flip it by string replacement
    switches = [node for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "TRAILING_BARRIER" for t in node.targets)]
    assert len(switches) == 1 and isinstance(switches[0].value, ast.Constant) and switches[0].value.value is True


@pytest.mark.parametrize("name", ORACLES)
def test_oracle_cuda_compiles_for_sm90a(name, tmp_path):
    try:
        find_nvcc()
    except CompileError:
        pytest.skip("nvcc is not installed")
    for source in cuda_sources(oracle_source(name)):
        cubin = build_cubin(source, arch="90a", cache_dir=tmp_path)
        assert cubin.exists() and cubin.stat().st_size > 0


def test_the_oracles_that_write_cuda_have_some():
    for name in ("all_reduce", "all_gather", "all_to_all", "ring_attention"):
        assert cuda_sources(oracle_source(name)), name
