"""What the hardware can do, for rooflines: link, memory and compute rates per GPU.

Datasheet values by GPU model, replaced by measured ones where a host has been measured (the
measured topology is cached per host). Rates are per direction, per GPU.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from sandbox.report import Roofline


class Topology(BaseModel):
    gpu_name: str
    gpu_count: int = 1
    link: str = Field("NVLink", description="NVLink, PCIe or none")
    link_gbps: float = Field(description="peer bandwidth one GPU can send at, GB/s per direction")
    hbm_gbps: float
    tflops: float = Field(description="dense bf16 matrix rate, TFLOP/s")
    measured: bool = False


DATASHEET = {
    "H200": Topology(gpu_name="NVIDIA H200", link_gbps=450.0, hbm_gbps=4800.0, tflops=989.0),
    "H100": Topology(gpu_name="NVIDIA H100", link_gbps=450.0, hbm_gbps=3350.0, tflops=989.0),
    "B200": Topology(gpu_name="NVIDIA B200", link_gbps=900.0, hbm_gbps=8000.0, tflops=2250.0),
    "A100": Topology(gpu_name="NVIDIA A100", link_gbps=300.0, hbm_gbps=2039.0, tflops=312.0),
}


def datasheet_topology(gpu_name: str, gpu_count: int = 1) -> Topology | None:
    for model, topology in DATASHEET.items():
        if model in gpu_name.upper():
            return topology.model_copy(update={"gpu_name": gpu_name, "gpu_count": gpu_count})
    return None


def roofline(topology: Topology, comm_bytes: float, flops: float, hbm_bytes: float) -> Roofline:
    times = {
        "interconnect": comm_bytes / (topology.link_gbps * 1e9),
        "hbm": hbm_bytes / (topology.hbm_gbps * 1e9),
        "compute": flops / (topology.tflops * 1e12),
    }
    limiter = max(times, key=times.get)
    return Roofline(
        bound_ms=times[limiter] * 1e3, limiter=limiter, comm_bytes_per_rank=comm_bytes, flops_per_rank=flops,
        hbm_bytes_per_rank=hbm_bytes, link_gbps=topology.link_gbps, hbm_gbps=topology.hbm_gbps, tflops=topology.tflops,
    )


def gpu_model_name() -> str | None:
    """The first visible GPU's name, read through NVML without creating a CUDA context."""
    import ctypes
    import os

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
        handle = ctypes.c_void_p()
        if visible.isdigit():
            found = nvml.nvmlDeviceGetHandleByIndex_v2(int(visible), ctypes.byref(handle))
        else:
            found = nvml.nvmlDeviceGetHandleByUUID(visible.encode(), ctypes.byref(handle))
        if found != 0:
            return None
        name = ctypes.create_string_buffer(96)
        if nvml.nvmlDeviceGetName(handle, name, 96) != 0:
            return None
        return name.value.decode()
    finally:
        nvml.nvmlShutdown()
