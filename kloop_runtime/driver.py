"""Loading cubins and launching their kernels on torch tensors, through the CUDA driver API.

No extra Python dependency: libcuda is called through ctypes. Kernel parameters are packed
from their sizes as the driver reports them (``cuFuncGetParamInfo``): a tensor becomes its
device pointer, an int a 4- or 8-byte integer, a float a float or double.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from functools import cache
from pathlib import Path
from typing import Any, Sequence

_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_CUDA_ERROR_INVALID_VALUE = 1


class CudaDriverError(RuntimeError):
    pass


@cache
def libcuda() -> ctypes.CDLL:
    """The CUDA driver library, with the argument types of the calls made here declared."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        raise CudaDriverError("the CUDA driver (libcuda.so.1) is not available: raw kernels need an NVIDIA GPU") from error
    lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    dims = [ctypes.c_uint] * 7  # grid x y z, block x y z, dynamic shared memory bytes
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, *dims, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.cuLaunchCooperativeKernel.argtypes = [ctypes.c_void_p, *dims, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def check(result: int, what: str) -> None:
    """Raise :class:`CudaDriverError` naming ``what`` when a driver call returned an error."""
    if result != 0:
        text = ctypes.c_char_p()
        libcuda().cuGetErrorString(result, ctypes.byref(text))
        raise CudaDriverError(f"{what} failed: CUDA error {result} ({(text.value or b'?').decode()})")


def _ensure_context() -> None:
    import torch

    if not torch.cuda.is_available():
        raise CudaDriverError("raw CUDA kernels need a GPU; this process sees none (device mode cpu?)")
    torch.cuda.current_stream().synchronize()  # makes the primary context current on this thread


class CudaKernel:
    """A kernel from a loaded cubin. Call it as ``kernel(grid, block, args, shared_mem=0)``."""

    def __init__(self, module: ctypes.c_void_p, name: str):
        self.name = name
        self._function = ctypes.c_void_p()
        check(libcuda().cuModuleGetFunction(ctypes.byref(self._function), module, name.encode()), f"finding kernel {name!r} (is it extern \"C\"?)")
        self.param_sizes = self._param_sizes()
        self._shared_limit = 48 * 1024
        self._slots = (ctypes.c_uint64 * max(len(self.param_sizes), 1))()
        base = ctypes.addressof(self._slots)
        self._pointers = (ctypes.c_void_p * max(len(self.param_sizes), 1))(*[base + 8 * i for i in range(len(self.param_sizes))])
        self._lock = threading.Lock()

    def _param_sizes(self) -> list[int]:
        sizes = []
        while True:
            offset, size = ctypes.c_size_t(), ctypes.c_size_t()
            result = libcuda().cuFuncGetParamInfo(self._function, ctypes.c_size_t(len(sizes)), ctypes.byref(offset), ctypes.byref(size))
            if result == _CUDA_ERROR_INVALID_VALUE:
                return sizes
            check(result, "cuFuncGetParamInfo")
            sizes.append(size.value)

    def _slot(self, index: int, value: Any, size: int, torch) -> int:
        """``value`` as the 64-bit integer whose low ``size`` bytes are the parameter's bytes."""
        where = f"argument {index} of kernel {self.name}"
        if isinstance(value, torch.Tensor):
            if not value.is_cuda:
                raise TypeError(f"{where}: tensor is on {value.device}, not a GPU")
            if size != 8:
                raise TypeError(f"{where}: got a tensor but the kernel takes a {size}-byte value")
            return value.data_ptr()
        if isinstance(value, ctypes._SimpleCData):
            if ctypes.sizeof(value) != size:
                raise TypeError(f"{where}: {type(value).__name__} is {ctypes.sizeof(value)} bytes, the kernel takes {size}")
            return int.from_bytes(ctypes.string_at(ctypes.addressof(value), size), "little")
        if isinstance(value, bool):
            if size not in (1, 4):
                raise TypeError(f"{where}: a bool cannot fill a {size}-byte parameter")
            return int(value)
        if isinstance(value, int):
            if size not in (4, 8):
                raise TypeError(f"{where}: an int cannot fill a {size}-byte parameter")
            if not -(2 ** (8 * size - 1)) <= value < 2 ** (8 * size):
                raise TypeError(f"{where}: {value} does not fit in {size} bytes")
            return value & ((1 << (8 * size)) - 1)
        if isinstance(value, float):
            if size not in (4, 8):
                raise TypeError(f"{where}: a float cannot fill a {size}-byte parameter")
            return struct.unpack("<I" if size == 4 else "<Q", struct.pack("<f" if size == 4 else "<d", value))[0]
        raise TypeError(f"{where}: cannot pass {type(value).__name__} (use a tensor, int, float or ctypes value)")

    def __call__(self, grid, block, args: Sequence[Any] = (), shared_mem: int = 0, stream: Any = None, cooperative: bool = False) -> None:
        """Launch on ``stream`` (default: torch's current stream). Each parameter sits in its own
        8-byte slot of a buffer kept with the kernel (the driver copies parameters at launch),
        so a launch costs a few microseconds of host time."""
        import torch

        if len(args) != len(self.param_sizes):
            raise TypeError(f"kernel {self.name} takes {len(self.param_sizes)} arguments, got {len(args)}")
        gx, gy, gz = (tuple(grid) + (1, 1))[:3]
        bx, by, bz = (tuple(block) + (1, 1))[:3]
        if shared_mem > self._shared_limit:
            check(libcuda().cuFuncSetAttribute(self._function, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared_mem)),
                   f"raising the dynamic shared memory of {self.name} to {shared_mem} bytes")
            self._shared_limit = shared_mem
        handle = (stream if stream is not None else torch.cuda.current_stream()).cuda_stream
        with self._lock:
            for index, (value, size) in enumerate(zip(args, self.param_sizes)):
                self._slots[index] = self._slot(index, value, size, torch)
            if cooperative:
                result = libcuda().cuLaunchCooperativeKernel(self._function, gx, gy, gz, bx, by, bz, shared_mem, handle, self._pointers)
            else:
                result = libcuda().cuLaunchKernel(self._function, gx, gy, gz, bx, by, bz, shared_mem, handle, self._pointers, None)
        if result:
            check(result, f"launching {self.name} with grid {(gx, gy, gz)} block {(bx, by, bz)}")


class CudaModule:
    """A loaded cubin; ``module.kernel(name)`` gives its kernels."""

    def __init__(self, cubin: Path):
        _ensure_context()
        image = cubin.read_bytes()
        self._module = ctypes.c_void_p()
        check(libcuda().cuModuleLoadData(ctypes.byref(self._module), ctypes.c_char_p(image)), f"loading {cubin.name}")
        self._kernels: dict[str, CudaKernel] = {}

    def kernel(self, name: str) -> CudaKernel:
        if name not in self._kernels:
            self._kernels[name] = CudaKernel(self._module, name)
        return self._kernels[name]
