"""nvcc with its two front ends at once (kloop_runtime/nvcc_parallel.py), on CPU (nvcc is present;
no GPU needed to build an object): the object is plain nvcc's but for the module id, which the host
stub and the device image agree on; errors are told as nvcc tells them, with its exit status; what it does not
recognise runs as plain nvcc; torch's dependency file is written."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kloop_runtime.build import find_nvcc

WRAPPER = Path(__file__).resolve().parents[2] / "kloop_runtime" / "nvcc_parallel.py"
SOURCE = r"""
namespace { __global__ void hidden(float* x) { x[threadIdx.x] *= 3.0f; } }
__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }
void launch(float* x) { twice<<<1, 32>>>(x); hidden<<<1, 32>>>(x); }
"""
FLAGS = ["-O3", "-gencode=arch=compute_90,code=sm_90", "-Xcompiler", "-fPIC", "-std=c++17"]
ANONYMOUS = re.compile(rb"_GLOBAL__N__(\w+?)6hidden")  # the kernel of the anonymous namespace, by its module id


@pytest.fixture
def nvcc():
    try:
        return find_nvcc()
    except Exception:  # noqa: BLE001 - CompileError; CI and the GPU machine have nvcc
        pytest.fail("nvcc is needed for these tests (CI installs none: the machine has it)")


def wrapped(args: list[str], cwd: Path, nvcc: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(WRAPPER), *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KLOOP_NVCC": nvcc, **env}, check=False)


def symbols(obj: Path) -> list[str]:
    """The object's symbols, its module id and the lengths in mangled names made alike."""
    (module,) = set(ANONYMOUS.findall(obj.read_bytes()))
    out = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    return sorted(re.sub(r"\d+", "#", line.split()[-1].replace(module.decode(), "ID")) for line in out.splitlines())


def test_the_object_is_plain_nvccs_and_both_sides_name_the_kernels_alike(tmp_path, nvcc):
    (tmp_path / "k.cu").write_text(SOURCE)
    result = wrapped([*FLAGS, "-c", "k.cu", "-o", "parallel.o"], tmp_path, nvcc)
    assert result.returncode == 0, result.stderr
    assert "front ends at once" in result.stderr
    subprocess.run([nvcc, *FLAGS, "-c", "k.cu", "-o", "plain.o"], cwd=tmp_path, check=True)
    assert symbols(tmp_path / "parallel.o") == symbols(tmp_path / "plain.o")
    ids = set(ANONYMOUS.findall((tmp_path / "parallel.o").read_bytes()))
    assert len(ids) == 1 and next(iter(ids)).endswith(b"_k_cu_kloop")  # the host stub's and the device image's names agree
    assert not list(Path(tmp_path).glob("tmpxft*")) and not list(tmp_path.glob("nvcc-*"))


@pytest.mark.parametrize(("broken", "word"), [
    (SOURCE.replace("*= 2.0f", "*= undefined_name_42"), "undefined_name_42"),  # both front ends fail: the host's is told
    ("void host_only() {}\n__global__ void k(float* x) { host_only(); }\n", "host_only"),  # only the device front end fails
])
def test_a_compile_error_is_told_as_nvcc_tells_it(tmp_path, nvcc, broken, word):
    (tmp_path / "k.cu").write_text(broken)
    result = wrapped([*FLAGS, "-c", "k.cu", "-o", "k.o"], tmp_path, nvcc)
    plain = subprocess.run([nvcc, *FLAGS, "-c", "k.cu", "-o", "k.o"], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == plain.returncode != 0
    assert result.stderr.count(word) == plain.stderr.count(word) >= 1
    assert "error" in result.stderr and not (tmp_path / "k.o").exists()


def test_torchs_dependency_file_is_written_and_its_flags_kept_from_nvcc(tmp_path, nvcc):
    (tmp_path / "k.cu").write_text(SOURCE)
    result = wrapped(["-MD", "-MF", "k.o.d", *FLAGS, "-c", "k.cu", "-o", "k.o"], tmp_path, nvcc)
    assert result.returncode == 0 and "front ends at once" in result.stderr, result.stderr
    assert (tmp_path / "k.o.d").read_text() == "k.o: k.cu\n"


@pytest.mark.parametrize(("args", "reason"), [
    (["-rdc=true", "-c", "k.cu", "-o", "k.o"], "relocatable device code"),
    (["-E", "k.cu", "-o", "k.ii"], "not a compile to an object: no -c"),
])
def test_what_it_does_not_recognise_runs_as_plain_nvcc(tmp_path, nvcc, args, reason):
    (tmp_path / "k.cu").write_text(SOURCE)
    result = wrapped([*FLAGS, *args], tmp_path, nvcc)
    assert result.returncode == 0, result.stderr
    assert f"plain nvcc ({reason})" in result.stderr
    assert (tmp_path / args[-1]).stat().st_size > 0


def test_it_can_be_turned_off(tmp_path, nvcc):
    (tmp_path / "k.cu").write_text(SOURCE)
    result = wrapped([*FLAGS, "-c", "k.cu", "-o", "k.o"], tmp_path, nvcc, KLOOP_PARALLEL_NVCC="0")
    assert result.returncode == 0 and "kloop nvcc" not in result.stderr
    assert b"_k_cu_kloop" not in (tmp_path / "k.o").read_bytes()


def test_the_extension_builder_names_it_as_torchs_nvcc(tmp_path, monkeypatch):
    """The builder hands torch this script (PYTORCH_NVCC) with the real nvcc beside it, where torch has CUDA."""
    import torch.utils.cpp_extension as cpp_extension

    from kloop_runtime import extension_builder

    seen = {}
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", "/opt/cuda-x")
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: seen.update(os.environ))
    for name in ("PYTORCH_NVCC", "KLOOP_NVCC", "TORCH_CUDA_ARCH_LIST"):  # restored after the test
        monkeypatch.delenv(name, raising=False)
    spec = {"name": "e", "cuda_sources": "__global__ void k() {}", "cpp_sources": "", "functions": None, "extra_cflags": [],
            "extra_cuda_cflags": [], "extra_ldflags": [], "extra_include_paths": [], "arch_list": "9.0"}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    extension_builder.main(str(tmp_path / "spec.json"))
    assert seen["KLOOP_NVCC"] == "/opt/cuda-x/bin/nvcc"
    assert seen["PYTORCH_NVCC"].split() == [sys.executable, str(WRAPPER)]


def test_a_host_compiler_named_with_ccbin_is_recognised(tmp_path, nvcc):
    (tmp_path / "k.cu").write_text(SOURCE)
    compiler = shutil.which("g++") or pytest.fail("g++ is needed (nvcc's host compiler)")
    result = wrapped(["-ccbin", compiler, *FLAGS, "-c", "k.cu", "-o", "k.o"], tmp_path, nvcc)
    assert result.returncode == 0 and "front ends at once" in result.stderr, result.stderr


def test_an_nvcc_that_is_not_there_is_one_line(tmp_path):
    (tmp_path / "k.cu").write_text(SOURCE)
    result = wrapped([*FLAGS, "-c", "k.cu", "-o", "k.o"], tmp_path, str(tmp_path / "no-nvcc"))
    assert result.returncode == 127 and "Traceback" not in result.stderr
    assert "cannot run" in result.stderr and "no-nvcc" in result.stderr
