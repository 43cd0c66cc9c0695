"""The measured topology of this host: GPUs, links, peer and HBM copy bandwidths.

Measured once per host by :mod:`sandbox.topology_probe` in a subprocess (the calling process
never holds a CUDA context) and cached in the kernel-loop cache dir, keyed by host name, GPU
UUIDs and driver version, so a new driver or a different set of visible GPUs measures again.
NVLink multicast is never touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import structlog
from pydantic import BaseModel, Field, ValidationError

from kloop_runtime import settings
from kloop_runtime.settings import MULTICAST_OFF
from sandbox import nvml
from sandbox.atomic_file import atomic_write

log = structlog.get_logger(__name__)

PROBE_TIMEOUT_S = 600.0


class TopologyUnavailable(RuntimeError):
    """This host cannot be measured (no GPU, no driver, or the probe failed); the message says why."""


class PeerLink(BaseModel):
    """Data moving from GPU ``src`` to GPU ``dst`` (CUDA ordinals), GB/s (1e9 bytes/s)."""

    src: int
    dst: int
    peer_access: bool
    copy_engine_gbps: float | None = Field(None, description="dst.copy_(src): cudaMemcpyAsync across devices, no SMs")
    sm_write_gbps: float | None = Field(None, description="a kernel on src stores 16-byte vectors into dst's memory (push)")
    sm_read_gbps: float | None = Field(None, description="a kernel on dst loads 16-byte vectors from src's memory (pull)")

    def best_gbps(self) -> float | None:
        rates = [r for r in (self.copy_engine_gbps, self.sm_write_gbps, self.sm_read_gbps) if r]
        return max(rates) if rates else None


class MeasuredGpu(BaseModel):
    ordinal: int
    name: str
    uuid: str
    memory_mib: int
    sm_count: int
    nvlinks_active: int = 0
    hbm_copy_gbps: float = Field(description="a local copy (kernel or torch copy_, the faster), read + write bytes per second")


class HostMeasurement(BaseModel):
    host: str
    key: str
    driver: str
    torch: str
    cuda: str | None = None
    gpus: list[MeasuredGpu]
    link: str = Field(description="NVLink, PCIe or none")
    pairs: list[PeerLink] = Field(default_factory=list)
    sm_write_gbps_by_blocks: dict[int, float] = Field(default_factory=dict, description="push 0->1 with this many blocks")
    all_peers_write_gbps: float | None = Field(None, description="every GPU pushes to all its peers at once; per GPU, per direction")
    transfer_mib: int
    measured_at: str
    wall_s: float
    notes: list[str] = Field(default_factory=list)

    def median(self, field: str) -> float | None:
        values = [getattr(p, field) for p in self.pairs if getattr(p, field)]
        return round(statistics.median(values), 1) if values else None

    def median_hbm_copy_gbps(self) -> float | None:
        values = [g.hbm_copy_gbps for g in self.gpus if g.hbm_copy_gbps]
        return round(statistics.median(values), 1) if values else None

    def best_link_gbps(self) -> float | None:
        """The fastest per-direction rate one GPU reached: the median over pairs of each pair's
        best mechanism, or the all-peers rate if higher."""
        best = [b for b in (p.best_gbps() for p in self.pairs) if b]
        candidates = [statistics.median(best)] if best else []
        if self.all_peers_write_gbps:
            candidates.append(self.all_peers_write_gbps)
        return round(max(candidates), 1) if candidates else None


def host_key(inventory: nvml.Inventory) -> str:
    identity = {"host": socket.gethostname(), "driver": inventory.driver, "gpus": sorted(g.uuid for g in inventory.gpus)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def cache_path(cache_root: Path, key: str) -> Path:
    return settings.topology_cache_dir(cache_root) / f"{key}.json"


def _cache_root(cache_root: Path | None) -> Path:
    return (cache_root or settings.cache_root()).resolve()


def _inventory() -> nvml.Inventory:
    try:
        found = nvml.inventory()
    except nvml.NvmlUnavailable as error:
        raise TopologyUnavailable(f"{error}: nothing to measure; prompts and rooflines use datasheet numbers") from None
    if not found.gpus:
        raise TopologyUnavailable("the NVIDIA driver sees no GPU here (check CUDA_VISIBLE_DEVICES): nothing to measure")
    return found


def cached_measurement(cache_root: Path | None = None) -> HostMeasurement | None:
    """This host's measurement if it is in the cache (never measures; None on CPU-only hosts)."""
    try:
        key = host_key(_inventory())
    except TopologyUnavailable:
        return None
    return _read(cache_path(_cache_root(cache_root), key))


def _read(path: Path) -> HostMeasurement | None:
    """The measurement cached at ``path``; None when there is none or it is unreadable."""
    if not path.exists():
        return None
    try:
        return HostMeasurement.model_validate_json(path.read_text())
    except (OSError, ValidationError) as error:
        log.warning("topology cache entry unreadable; ignoring it", path=str(path), error=str(error)[:200])
        return None


def measure_host(cache_root: Path | None = None, refresh: bool = False, transfer_mib: int = 256,
                 timeout_s: float = PROBE_TIMEOUT_S) -> tuple[HostMeasurement, bool]:
    """This host's measurement, from the cache unless ``refresh``; returns it and whether it
    was measured now. Raises :class:`TopologyUnavailable` with a one-line reason."""
    inventory = _inventory()
    key = host_key(inventory)
    path = cache_path(_cache_root(cache_root), key)
    if not refresh:
        cached = _read(path)
        if cached is not None:
            return cached, False
    measurement = run_probe(inventory, key, transfer_mib, timeout_s)
    atomic_write(path, measurement.model_dump_json(indent=2))
    log.info("topology measured", host=measurement.host, gpus=len(measurement.gpus), wall_s=measurement.wall_s, path=str(path))
    return measurement, True


def run_probe(inventory: nvml.Inventory, key: str, transfer_mib: int, timeout_s: float) -> HostMeasurement:
    """Run :mod:`sandbox.topology_probe` in a fresh interpreter and parse its JSON."""
    command = [sys.executable, "-P", "-m", "sandbox.topology_probe", "--key", key, "--transfer-mib", str(transfer_mib),
               "--driver", inventory.driver, "--nvlinks", ",".join(f"{g.uuid}={g.nvlinks_active}" for g in inventory.gpus)]
    env = {**os.environ, **MULTICAST_OFF, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                                                      os.environ.get("PYTHONPATH")]))}
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise TopologyUnavailable(f"the topology probe did not finish within {timeout_s:.0f} s") from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise TopologyUnavailable(f"the topology probe failed (exit {proc.returncode}): {tail}")
    payload = json.loads(lines[-1])
    if "error" in payload:
        raise TopologyUnavailable(payload["error"])
    return HostMeasurement.model_validate(payload)
