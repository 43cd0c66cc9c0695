import pytest

from sandbox.harness.static_checks import check_source

OK = "import torch\nfrom sandbox import runtime\n\ndef solution(x):\n    return x.clone()\n"


def test_a_plain_solution_passes():
    assert check_source(OK).status == "ok"


def test_a_file_with_null_bytes_is_a_build_failure_without_a_line():
    verdict = check_source("def solution(x):\n    return x\x00\n")
    assert verdict.status == "build_failed" and "SyntaxError" in verdict.message and "line None" not in verdict.message


def test_syntax_errors_are_build_failures_with_the_line():
    verdict = check_source("def solution(x):\n    return x +\n")
    assert verdict.status == "build_failed" and "line 2" in verdict.message


@pytest.mark.parametrize("code, why", [
    ("def helper(x):\n    return x\n", "no top-level function `solution`"),
    ("import torch.distributed as dist\ndef solution(x):\n    dist.all_reduce(x)\n    return x\n", "NCCL"),
    ("from torch.distributed import all_gather\ndef solution(x):\n    return x\n", "NCCL"),
    ("import torch\ndef solution(x):\n    torch.distributed.broadcast(x, 0)\n    return x\n", "NCCL"),
    ("import torch\ndef solution(x):\n    return torch.ops.symm_mem.one_shot_all_reduce(x, 'sum', 'g')\n", "prebuilt"),
    ("SRC = 'multimem.ld_reduce.relaxed.sys.global.add.v4.bf16x2'\ndef solution(x):\n    return x\n", "multicast"),
    ("SRC = 'ncclAllReduce(a, b, n, ncclBfloat16, ncclSum, comm, s);'\ndef solution(x):\n    return x\n", "NCCL from CUDA"),
    ("import subprocess\ndef solution(x):\n    return x\n", "starting processes"),
    ("import socket\ndef solution(x):\n    return x\n", "network"),
    ("import ctypes\ndef solution(x):\n    return x\n", "raw memory"),
    ("def solution(x):\n    exec('1')\n    return x\n", "`exec`"),
    ("import sys\ndef solution(x):\n    sys.modules['torch'] = None\n    return x\n", "sys.modules"),
    ("import sys\ndef solution(x):\n    return sys.modules['torch']\n", "reaches around"),
    ("import torch\ntorch.cuda.synchronize = lambda *a: None\ndef solution(x):\n    return x\n", "module's attribute"),
    ("import os\nos.environ['NCCL_NVLS_ENABLE'] = '1'\ndef solution(x):\n    return x\n", "os.environ"),
    ("import os\ndef solution(x):\n    os.system('ls')\n    return x\n", "reaches around"),
    ("from sandbox.harness import worker\ndef solution(x):\n    return x\n", "harness"),
])
def test_forbidden_constructs_are_rejected(code, why):
    verdict = check_source(code)
    assert verdict.status == "rejected" and why in verdict.message, verdict.message


def test_collectives_are_allowed_when_the_run_allows_nccl():
    code = "import torch.distributed as dist\ndef solution(x):\n    dist.all_reduce(x)\n    return x\n"
    assert check_source(code, allow_nccl=True).status == "ok"


def test_setup_barriers_and_backend_switches_are_fine():
    code = "import torch\nimport torch.distributed as dist\ntorch.backends.cuda.matmul.allow_tf32 = True\n" \
           "def solution(x):\n    dist.barrier()\n    return x\n"
    assert check_source(code).status == "ok"
