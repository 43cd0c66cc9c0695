"""What the hardware can do, for rooflines and prompts: link, memory and compute rates per GPU.

Datasheet values by GPU model, replaced by measured ones where this host has been measured
(:mod:`sandbox.topology_measure`; ``kloop topology``). Rates are per direction, per GPU, in
GB/s (1e9 bytes/s).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from sandbox.nvml import gpu_model_name
from sandbox.report import Roofline
from sandbox.topology_measure import HostMeasurement, cached_measurement

if TYPE_CHECKING:
    from problems.contract import Cost, Problem


class Topology(BaseModel):
    gpu_name: str
    gpu_count: int = 1
    link: str = Field("NVLink", description="NVLink, PCIe or none")
    link_gbps: float = Field(description="peer bandwidth one GPU can send at, GB/s per direction (the roofline's)")
    hbm_gbps: float = Field(description="HBM bandwidth, read + write bytes per second (the roofline's)")
    tflops: float = Field(description="dense bf16 matrix rate, TFLOP/s (datasheet)")
    measured: bool = Field(False, description="link_gbps or hbm_gbps comes from a measurement of this host")
    link_measured: bool = False
    hbm_measured: bool = False
    datasheet_link_gbps: float | None = None
    datasheet_hbm_gbps: float | None = None
    copy_engine_gbps: float | None = Field(None, description="measured: copy-engine peer copy, median over GPU pairs")
    sm_write_gbps: float | None = Field(None, description="measured: kernel stores into a peer (push), median over pairs")
    sm_read_gbps: float | None = Field(None, description="measured: kernel loads from a peer (pull), median over pairs")
    all_peers_write_gbps: float | None = Field(None, description="measured: every GPU pushing to all peers at once, per GPU")
    sm_write_gbps_by_blocks: dict[int, float] = Field(default_factory=dict, description="measured: push rate by block count")
    sm_count: int | None = None
    pairs_measured: int = 0
    measured_gpus: int = 0
    host: str | None = None


DATASHEET = {
    "H200": Topology(gpu_name="NVIDIA H200", link_gbps=450.0, hbm_gbps=4800.0, tflops=989.0),
    "H100": Topology(gpu_name="NVIDIA H100", link_gbps=450.0, hbm_gbps=3350.0, tflops=989.0),
    "B200": Topology(gpu_name="NVIDIA B200", link_gbps=900.0, hbm_gbps=8000.0, tflops=2250.0),
    "A100": Topology(gpu_name="NVIDIA A100", link_gbps=300.0, hbm_gbps=2039.0, tflops=312.0),
}
FALLBACK = Topology(gpu_name="NVIDIA H200", link_gbps=450.0, hbm_gbps=4800.0, tflops=989.0)


def datasheet_topology(gpu_name: str, gpu_count: int = 1) -> Topology | None:
    for model, topology in DATASHEET.items():
        if model in gpu_name.upper():
            return topology.model_copy(update={"gpu_name": gpu_name, "gpu_count": gpu_count, "datasheet_link_gbps": topology.link_gbps,
                                               "datasheet_hbm_gbps": topology.hbm_gbps})
    return None


def with_measurement(base: Topology, measurement: HostMeasurement) -> Topology:
    """``base`` (datasheet rates) with this host's measured rates put in where there are some."""
    link_gbps = measurement.best_link_gbps()
    hbm_gbps = measurement.median_hbm_copy_gbps()
    return base.model_copy(update={
        "link": measurement.link, "link_gbps": link_gbps or base.link_gbps, "hbm_gbps": hbm_gbps or base.hbm_gbps,
        "measured": bool(link_gbps or hbm_gbps), "link_measured": bool(link_gbps), "hbm_measured": bool(hbm_gbps),
        "datasheet_link_gbps": base.datasheet_link_gbps or base.link_gbps, "datasheet_hbm_gbps": base.datasheet_hbm_gbps or base.hbm_gbps,
        "copy_engine_gbps": measurement.median("copy_engine_gbps"), "sm_write_gbps": measurement.median("sm_write_gbps"),
        "sm_read_gbps": measurement.median("sm_read_gbps"), "all_peers_write_gbps": measurement.all_peers_write_gbps,
        "sm_write_gbps_by_blocks": dict(measurement.sm_write_gbps_by_blocks),
        "sm_count": measurement.gpus[0].sm_count if measurement.gpus else None,
        "pairs_measured": len(measurement.pairs), "measured_gpus": len(measurement.gpus), "host": measurement.host,
    })


def host_topology(world: int, gpu_name: str | None = None, cache_root: Path | None = None) -> Topology:
    """This host's topology for ``world`` ranks: the cached measurement over the datasheet of
    its GPU model (an H200's datasheet when the model is unknown or there is no GPU here)."""
    measurement = cached_measurement(cache_root)
    name = gpu_name or (measurement.gpus[0].name if measurement and measurement.gpus else None) or gpu_model_name() or FALLBACK.gpu_name
    base = datasheet_topology(name, world) or FALLBACK.model_copy(update={"gpu_name": name, "gpu_count": world})
    if measurement is not None and measurement.gpus and measurement.gpus[0].name == name:
        return with_measurement(base, measurement)
    return base


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
        link_measured=topology.link_measured, hbm_measured=topology.hbm_measured,
    )


def roofline_for(topo: Topology, cost: Cost) -> Roofline | None:
    """The roofline of a problem's cost model on ``topo``; None when the problem has no cost
    model (no communication, compute or HBM traffic, e.g. ParallelKernelBench's)."""
    if not (cost.comm_bytes or cost.flops or cost.hbm_bytes):
        return None
    return roofline(topo, cost.comm_bytes, cost.flops, cost.hbm_bytes)


class UnknownGpu(ValueError):
    """A GPU model with no datasheet here; the message lists the known ones."""


class ProblemRoofline(BaseModel):
    """The fastest a solution of a problem could run: default size, largest declared world size."""

    ms: float
    limiter: str
    world: int
    gpu: str


def problem_rooflines(problems: Iterable[Problem], gpu_name: str | None = None) -> dict[str, ProblemRoofline | None]:
    """Each problem's roofline (None without a cost model) on ``gpu_name``'s datasheet, else on
    this host (measured where it has been); each world size's topology is made once."""
    topologies: dict[int, Topology] = {}
    rooflines: dict[str, ProblemRoofline | None] = {}
    for problem in problems:
        world = max(problem.spec.world_sizes)
        if world not in topologies:
            topologies[world] = _named_or_host_topology(world, gpu_name)
        bound = roofline_for(topologies[world], problem.cost_at(world))
        rooflines[problem.name] = None if bound is None else ProblemRoofline(
            ms=round(bound.bound_ms, 6), limiter=bound.limiter, world=world, gpu=topologies[world].gpu_name)
    return rooflines


def _named_or_host_topology(world: int, gpu_name: str | None) -> Topology:
    if not gpu_name:
        return host_topology(world)
    topo = datasheet_topology(gpu_name, world)
    if topo is None:
        raise UnknownGpu(f"no datasheet for GPU {gpu_name!r}; known: {', '.join(DATASHEET)}")
    return topo
