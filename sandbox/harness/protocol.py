"""Messages between the harness parent and its rank workers (sent over private pipes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Role = Literal["reference", "candidate"]
DeviceMode = Literal["cpu", "cuda", "emulate"]


@dataclass(frozen=True)
class WorkerArgs:
    role: Role
    rank: int
    world: int
    device_mode: DeviceMode
    store_port: int
    problem_ref: str
    dtype: str
    shape: dict[str, Any]
    module_path: Path
    workdir: Path
    log_path: Path
    readable_paths: tuple[str, ...] = ()
    compile_cache: Path | None = None
    env: dict[str, str] = field(default_factory=dict)


# parent -> worker commands
@dataclass(frozen=True)
class Load:
    pass


@dataclass(frozen=True)
class RunTrials:
    seeds: tuple[int, ...]
    isolated_calls: int = 1  # the first calls run with a host sync around them; the rest back-to-back
    include_native: bool = False  # reference only: also return the native-precision outputs (problem lint)
    perturb: tuple[int | None, ...] = ()  # reference only (problem lint): trial i adds noise to its input perturb[i]


@dataclass(frozen=True)
class TimeCalls:
    warmup: int
    iterations: int
    rotate_bytes: int  # make input sets (2 to 8) until together they are at least this large
    seed: int
    budget_s: float


@dataclass(frozen=True)
class Profile:
    iterations: int
    seed: int


@dataclass(frozen=True)
class Exit:
    pass


# worker -> parent replies
@dataclass
class Ready:
    rank: int


@dataclass
class Done:
    rank: int
    payload: Any = None
    violations: tuple[str, ...] = ()


@dataclass
class Failed:
    """The rank's code raised. ``kind`` is build (import or compile), call (solution raised) or
    harness (our own bug); ``text`` is the traceback."""

    rank: int
    kind: Literal["build", "call", "harness", "violation"]
    message: str
    text: str = ""
    violations: tuple[str, ...] = ()


@dataclass
class CompileRequest:
    """A rank asks the trusted parent to compile (the parent owns the compile cache)."""

    request_id: int
    kind: Literal["cubin", "extension"]
    payload: dict[str, Any]


@dataclass
class CompileReply:
    request_id: int
    ok: bool
    path: str = ""
    log: str = ""


@dataclass(frozen=True)
class PackedTensor:
    """A CPU tensor as plain bytes. Tensors never cross the pipe as torch objects: torch's own
    pickling hands out shared-memory file descriptors through a helper socket, which neither
    needs nor should be open to a confined rank."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @classmethod
    def of(cls, tensor) -> "PackedTensor":
        import ctypes

        import torch

        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        # ctypes, not .numpy(): the harness image need not have numpy, and torch does not depend on it
        data = ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size()) if flat.numel() else b""
        return cls(str(flat.dtype).removeprefix("torch."), tuple(tensor.shape), data)

    def unpack(self):
        import torch

        dtype = getattr(torch, self.dtype)
        if not self.data:
            return torch.empty(self.shape, dtype=dtype)
        return torch.frombuffer(bytearray(self.data), dtype=torch.uint8).view(dtype).reshape(self.shape)


@dataclass
class ReferenceOutput:
    """The reference's outputs for one seed on one rank: the upcast run (the values to match)
    and how far the native-precision run is from it (the accuracy any solution may match)."""

    expected: list[Any]  # CPU tensors, fp32 (16-bit problems) or fp64 (fp32 problems)
    shapes: list[tuple[int, ...]]
    dtypes: list[str]
    native_max_abs_err: list[float]
    native_rms_err: list[float]
    native: list[Any] | None = None  # the native-precision outputs, when asked for
    nearly_constant_inputs: bool = False  # every sizeable floating input held only a few distinct values


@dataclass
class CandidateOutput:
    outputs: list[Any]  # CPU tensors in the candidate's dtype, or a description of a non-tensor leaf
    modified_inputs: list[int]
