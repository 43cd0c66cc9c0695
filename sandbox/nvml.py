"""What GPUs this host has, read through NVML (ctypes, no extra dependency) without creating a
CUDA context: names, UUIDs, the driver version and active NVLinks. Honours
CUDA_VISIBLE_DEVICES (indices or UUIDs), so the answer matches what CUDA processes will see."""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

NVML_NVLINK_MAX_LINKS = 18


class NvmlUnavailable(RuntimeError):
    """No NVIDIA driver here (or it does not answer)."""


@dataclass(frozen=True)
class GpuRecord:
    index: int  # NVML's index (PCI order), not necessarily the CUDA ordinal
    name: str
    uuid: str
    memory_mib: int
    nvlinks_active: int


@dataclass(frozen=True)
class Inventory:
    driver: str
    gpus: tuple[GpuRecord, ...]


@contextmanager
def _nvml() -> Iterator[ctypes.CDLL]:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        raise NvmlUnavailable("no NVIDIA driver on this machine (libnvidia-ml.so.1 not found)") from None
    if lib.nvmlInit_v2() != 0:
        raise NvmlUnavailable("the NVIDIA driver did not initialise (nvmlInit failed)")
    try:
        yield lib
    finally:
        lib.nvmlShutdown()


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def _record(lib: ctypes.CDLL, index: int, handle: ctypes.c_void_p) -> GpuRecord:
    name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
    lib.nvmlDeviceGetName(handle, name, 96)
    lib.nvmlDeviceGetUUID(handle, uuid, 96)
    memory = _Memory()
    memory_mib = memory.total // 2**20 if lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0 else 0
    links = 0
    for link in range(NVML_NVLINK_MAX_LINKS):
        active = ctypes.c_int(0)
        if lib.nvmlDeviceGetNvLinkState(handle, ctypes.c_uint(link), ctypes.byref(active)) == 0 and active.value == 1:
            links += 1
    return GpuRecord(index=index, name=name.value.decode(), uuid=uuid.value.decode(), memory_mib=int(memory_mib), nvlinks_active=links)


def _visible(records: list[GpuRecord]) -> list[GpuRecord]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return records
    chosen = []
    for item in (v.strip() for v in visible.split(",")):
        if not item:
            break
        if item.isdigit():
            match = [r for r in records if r.index == int(item)]
        else:
            match = [r for r in records if r.uuid.startswith(item) or r.uuid.removeprefix("GPU-").startswith(item.removeprefix("GPU-"))]
        if not match:
            break  # CUDA stops at the first invalid entry too
        chosen.append(match[0])
    return chosen


def inventory() -> Inventory:
    """The visible GPUs and the driver version; raises :class:`NvmlUnavailable` without a driver."""
    with _nvml() as lib:
        driver = ctypes.create_string_buffer(96)
        lib.nvmlSystemGetDriverVersion(driver, 96)
        count = ctypes.c_uint(0)
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            raise NvmlUnavailable("NVML could not count the GPUs")
        records = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0:
                records.append(_record(lib, index, handle))
        return Inventory(driver=driver.value.decode(), gpus=tuple(_visible(records)))


def gpu_model_name() -> str | None:
    """The first visible GPU's name, or None when there is none."""
    try:
        gpus = inventory().gpus
    except NvmlUnavailable:
        return None
    return gpus[0].name if gpus else None
