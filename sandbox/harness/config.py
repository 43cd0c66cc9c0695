"""What one evaluation is asked to do (written by the controller, read by the harness)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, Field

from sandbox.rank.device import WARM_UP_MS

# The device modes, the one definition: how ranks map to devices.
DeviceMode = Literal["cpu", "cuda", "emulate"]
DEVICE_MODES: tuple[str, ...] = get_args(DeviceMode)
DEVICE_MODE_HELP = {
    "cpu": "gloo on CPU tensors",
    "cuda": "one GPU per rank",
    "emulate": "all ranks on one GPU, correctness only",
}


def gpus_needed(device: str, world: int) -> int:
    """How many GPUs an evaluation of ``world`` ranks takes in a device mode: one per rank in
    ``cuda`` mode, the one they share in ``emulate`` mode, none on ``cpu``."""
    return {"cuda": world, "emulate": 1}.get(device, 0)


TIMING_PRECISION_HELP = ("time more calls (up to 4x the planned ones, within the timing budget) until the speedup's 95% interval "
                         "is within this share of it either way, while more calls may get it there (at the spread seen, 4x "
                         "the calls would leave it at most 1.5x wider than asked); 0: only the planned calls, the fastest (an "
                         "RL loop's choice); default: 0.03 in cuda mode, else 0 (a shared host CPU is rarely that steady)")

DEFAULT_RANK_MEMORY_GIB = 32.0
MIN_RANK_MEMORY_GIB = 4.0  # a CUDA rank holds 2-3 GiB of host memory on its own; GPU hosts may show little MemTotal at first


class StageTimeouts(BaseModel):
    startup_s: float = 180.0
    build_s: float = 600.0
    correctness_s: float = 180.0
    performance_s: float = 300.0
    profile_s: float = 180.0


class HarnessConfig(BaseModel):
    problem: str
    problem_ref: str | None = Field(None, description="how to load a problem from outside the suite (its Problem.ref, "
                                    "e.g. pkb:<root>::<stem>); default: the suite problem named `problem`")
    solution: Path = Path("solution.py")
    world: int = Field(2, ge=1, le=64)
    device: DeviceMode = "cpu"
    dtype: str | None = None
    size: str | None = Field(None, description="a named shape of the problem; default: `default` in cuda mode, `small` otherwise")
    trials: int = Field(5, ge=1, le=100)
    seed: int = 0
    timed: bool | None = Field(None, description="time reference and candidate; default: yes except in emulate mode")
    profile: bool | None = Field(None, description="profile the candidate; default: yes in cuda mode")
    warmup: int = Field(10, ge=0)
    warm_up_ms: float = Field(WARM_UP_MS, ge=0.0, le=20.0, description="on a GPU, the L2 flush repeated before every timed "
                              "call for about this long (the GPU busy, not idle, when the call starts); 0: one flush only")
    iterations: int = Field(50, ge=10)
    timing_budget_s: float = Field(20.0, description="stop timing after this long (at least 10 iterations)")
    timing_precision: float | None = Field(None, ge=0.0, le=1.0, description=TIMING_PRECISION_HELP)
    stress_calls: int = Field(0, ge=0, le=100_000, description="after correctness, this many back-to-back calls, every output checked")
    allow_nccl: bool = Field(False, description="let the candidate call torch.distributed collectives")
    profile_cache: bool = Field(True, description="reuse profiles taken before of the same solution and reference")
    rank_memory_gib: float | None = Field(None, gt=0, description="host memory (resident, with whatever it forks) a "
                                          "candidate rank may hold before the harness stops it; default: 32 GiB, or less "
                                          "where the host has less (3/4 of it shared by the ranks, at least 4 GiB)")
    workdir_gib: float | None = Field(None, gt=0, description="what the candidate's processes may write to their work folder "
                                      "(with files they deleted and hold open) before the harness stops them; default: 8 GiB, "
                                      "or an eighth of the host's memory where that is less (the folder may be a tmpfs)")
    cache_dir: Path | None = None
    timeouts: StageTimeouts = Field(default_factory=StageTimeouts)

    def resolved_size(self) -> str:
        return self.size or ("default" if self.device == "cuda" else "small")

    def rank_memory_bytes(self) -> int:
        if self.rank_memory_gib is not None:
            return int(self.rank_memory_gib * 2**30)
        import psutil

        share = 0.75 * psutil.virtual_memory().total / self.world
        return int(max(min(DEFAULT_RANK_MEMORY_GIB * 2**30, share), MIN_RANK_MEMORY_GIB * 2**30))

    def workdir_bytes(self) -> int:
        from sandbox.jail.spec import default_tmpfs_bytes

        return int(self.workdir_gib * 2**30) if self.workdir_gib is not None else default_tmpfs_bytes()

    def resolved_timing_precision(self) -> float:
        if self.timing_precision is not None:
            return self.timing_precision
        return 0.03 if self.device == "cuda" else 0.0

    def is_timed(self) -> bool:
        return self.device != "emulate" if self.timed is None else (self.timed and self.device != "emulate")

    def is_profiled(self) -> bool:
        return self.device == "cuda" if self.profile is None else (self.profile and self.device == "cuda")
