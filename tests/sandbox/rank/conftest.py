"""rank_kernels.cu built for the host: the same functions the GPU runs, checked where there is none."""

import ctypes
import subprocess

import pytest

from sandbox.rank import device_kernels


@pytest.fixture(scope="session")
def rank_kernels_host(tmp_path_factory) -> ctypes.CDLL:
    library = tmp_path_factory.mktemp("rank_kernels") / "rank_kernels.so"
    subprocess.run(["g++", "-O2", "-fno-strict-aliasing", "-x", "c++", "-DKLOOP_HOST_BUILD", "-shared", "-fPIC", "-o", str(library),
                    str(device_kernels.SOURCE)], check=True)
    built = ctypes.CDLL(str(library))
    built.kloop_mask_chacha20_host.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_uint]
    return built
