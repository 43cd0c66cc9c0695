"""Compiling through the harness on CPU (nvcc is present; no GPU needed to build a cubin): one
build per source whatever the number of ranks, whole compiler logs, hostile includes refused,
and the torch-extension path."""

import os
from pathlib import Path

from sandbox.backends import LocalSandbox
from sandbox.evaluate import evaluate_in
from sandbox.harness.config import HarnessConfig

KERNEL = r'''extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}'''

COMPILING_CANDIDATE = '''
import torch
import torch.distributed as dist
from sandbox import runtime

SOURCE = r"""KERNEL"""
CUBIN = runtime.compile_cubin(SOURCE)


def solution(tensor):
    assert CUBIN.read_bytes()[:4] == b"\\x7fELF"  # readable by the confined rank
    out = tensor.float()
    dist.all_reduce(out)
    return out.to(tensor.dtype)
'''


def config(world=4):
    return HarnessConfig(problem="all_reduce", world=world, device="cpu", allow_nccl=True, trials=2, timed=False)


def test_every_rank_asks_one_build_happens(tmp_path):
    """From a cold cache (a folder that does not exist yet): one build, and every confined rank can read it."""
    source = COMPILING_CANDIDATE.replace("KERNEL", KERNEL)
    cache = tmp_path / "fresh-cache"
    with LocalSandbox(env={"KLOOP_CACHE_DIR": str(cache)}) as box:
        report = evaluate_in(box, source, config(4))
    assert report.status == "correct", report.message
    assert report.compiles.requests == 4 and report.compiles.distinct == 1 and report.compiles.failed == 0
    assert len(list((cache / "compile").glob("*.cubin"))) == 1


def test_compiler_errors_come_back_whole(local_sandbox):
    source = COMPILING_CANDIDATE.replace("KERNEL", KERNEL.replace("x[i] *= a;", "x[i] *= a + undefined_name_42;"))
    report = evaluate_in(local_sandbox, source, config(2))
    assert report.status == "build_failed"
    assert "undefined_name_42" in report.build_log.text() and "error" in report.build_log.text()


def test_hostile_includes_cannot_read_the_users_files(local_sandbox):
    secret = Path(os.environ["KLOOP_CACHE_DIR"]) / "secret"
    report = evaluate_in(local_sandbox, COMPILING_CANDIDATE.replace("KERNEL", f'#include "{secret}"\n' + KERNEL), config(2))
    assert report.status == "build_failed"
    log = report.build_log.text()
    assert "Permission denied" in log or "No such file or directory" in log  # the compiler's jail: unreadable, or not there
    assert secret.read_bytes().hex() not in report.model_dump_json()


def test_candidates_cannot_read_the_harness_caches(local_sandbox):
    secret = Path(os.environ["KLOOP_CACHE_DIR"]) / "secret"
    snooping = f'''
import torch
import torch.distributed as dist


def solution(tensor):
    open("{secret}", "rb").read()
    out = tensor.clone()
    dist.all_reduce(out)
    return out
'''
    report = evaluate_in(local_sandbox, snooping, config(2))
    assert secret.is_file()  # it is there on the host; the candidate's rank cannot see it
    assert report.status == "crashed" and ("PermissionError" in report.message or "FileNotFoundError" in report.message)
    # the control: the same candidate reading a file it may read (its own source) is judged correct
    honest = snooping.replace(f'open("{secret}", "rb")', 'open(__file__, "rb")')
    assert evaluate_in(local_sandbox, honest, config(2)).status == "correct"


def test_torch_extension_path_builds_and_runs_on_cpu(local_sandbox):
    extension = '''
import torch
import torch.distributed as dist
from sandbox import runtime

CPP = """
#include <torch/extension.h>
torch::Tensor widen(torch::Tensor x) { return x.to(torch::kFloat32); }
"""
EXT = runtime.load_extension("widen_ext", cpp_sources=CPP, functions=["widen"])


def solution(tensor):
    out = EXT.widen(tensor)
    dist.all_reduce(out)
    return out.to(tensor.dtype)
'''
    report = evaluate_in(local_sandbox, extension, config(2))
    assert report.status == "correct", report.model_dump_json(indent=1)[-3000:]
    assert report.compiles.distinct == 1


def test_a_cuda_source_binding_its_own_module_needs_no_main_cpp():
    """ParallelKernelBench's style (nothing for main.cpp) is built from the .cu alone; a spec with
    C++ sources or functions to bind keeps load_inline's main.cpp."""
    from kloop_runtime.extension_builder import cuda_only

    spec = {"cuda_sources": "__global__ void k() {}", "cpp_sources": "", "functions": None}
    assert cuda_only(spec)
    assert cuda_only({**spec, "cpp_sources": "  \n"})
    assert not cuda_only({**spec, "cpp_sources": "torch::Tensor run(torch::Tensor x);"})
    assert not cuda_only({**spec, "functions": ["run"]})
    assert not cuda_only({**spec, "cuda_sources": "", "cpp_sources": "int f() { return 1; }"})
