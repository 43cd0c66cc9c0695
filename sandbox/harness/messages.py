"""What a rank may say to the parent, checked before anything of it is used.

A candidate rank's replies are claims from a hostile process: each is validated against its
schema (types, ranges, bounded lengths) and anything else is a protocol violation, which makes
the evaluation ``rejected``. Over-long text from a rank (an error message, a traceback) is cut,
not refused: it is shown, never interpreted.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator


MAX_TEXT = 50_000
MAX_CALLS = 4096
MAX_SEALED_BYTES = 64 * 2**30  # a sealed copy of a call's bytes; compared, where asked, with what the rank shows


def _cut(limit: int):
    return BeforeValidator(lambda value: value[:limit] if isinstance(value, str) else value)


Text = Annotated[str, _cut(MAX_TEXT)]
Line = Annotated[str, _cut(2_000)]
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
Millis = Annotated[float, Field(ge=0.0, le=3.6e6)]
# a device activity as it crosses the wire, ``[name, start_us, end_us]``: JSON has no tuples and the
# models are strict, so a list of exactly three is taken as the tuple (its items still strict)
Activity = Annotated[tuple[Line, float, float], BeforeValidator(lambda value: tuple(value) if isinstance(value, list) else value)]


class Reply(BaseModel):
    """``carries_fds``: whether the reply may come with descriptors (a reveal's blobs, the
    reference's inputs); any other reply that brings some is a protocol violation, its
    descriptors closed at once: kept, each could hold a memfd's memory in the judge beyond the
    rank's limit and its life (tests/fixtures/hostile/descriptors_in_every_reply.py)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    carries_fds: ClassVar[bool] = False
    sealed_copies: ClassVar[bool] = False  # its descriptors, if any, are sealed copies of calls' bytes (checked on arrival)

    type: str


class Ready(Reply):
    type: Literal["ready"]
    rank: int = Field(ge=0)
    overhead_ms: Millis
    device_barrier: bool
    backend: Line
    flush_ms: Millis  # one L2 flush's device time in its process (0: no GPU flush)
    walled_off: bool = False  # in a Landlock domain of its own, entered before any candidate code ran (sandbox/rank/zygote.py)


class Loaded(Reply):
    type: Literal["loaded"]


class Staged(Reply):
    type: Literal["staged"]
    round: int
    calls: int = Field(ge=0, le=MAX_CALLS)


class Primed(Reply):
    type: Literal["primed"]


class Done(Reply):
    carries_fds: ClassVar[bool] = True
    sealed_copies: ClassVar[bool] = True
    type: Literal["done"]
    round: int
    index: int = Field(ge=0, le=MAX_CALLS)
    ms: Millis
    checksum: Digest

    @field_validator("ms")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("a time must be finite")
        return value


class BurstDone(Reply):
    carries_fds: ClassVar[bool] = True
    sealed_copies: ClassVar[bool] = True
    type: Literal["burst_done"]
    round: int
    checksums: list[Digest] = Field(max_length=MAX_CALLS)


class Revealed(Reply):
    carries_fds: ClassVar[bool] = True
    type: Literal["revealed"]
    round: int
    indices: list[int] = Field(max_length=MAX_CALLS)


class Calibrated(Reply):
    carries_fds: ClassVar[bool] = True
    sealed_copies: ClassVar[bool] = True
    type: Literal["calibrated"]
    round: int
    index: int = Field(ge=0, le=MAX_CALLS)
    ms: Millis


class Dropped(Reply):
    type: Literal["dropped"]
    round: int


class Profiled(Reply):
    type: Literal["profiled"]
    round: int
    calls: int = Field(ge=0, le=MAX_CALLS)
    wall_ms: list[Millis] = Field(max_length=MAX_CALLS)
    activities: list[Activity] = Field(max_length=20_000)


class Made(Reply):
    carries_fds: ClassVar[bool] = True
    type: Literal["made"]
    calls: list[dict[str, Any]]


class Failed(Reply):
    """The rank's code raised. ``kind``: build (import or compile), call (the solution raised),
    harness (set-up failed before any candidate code ran); ``text`` is the traceback."""

    type: Literal["failed"]
    kind: Literal["build", "call", "harness"]
    message: Line
    text: Text = ""


class CompileRequest(Reply):
    type: Literal["compile"]
    id: int
    kind: Literal["cubin", "extension"]
    payload: dict[str, Any]


REPLIES: dict[str, type[Reply]] = {model.model_fields["type"].annotation.__args__[0]: model  # type: ignore[union-attr]
                                   for model in (Ready, Loaded, Staged, Primed, Done, BurstDone, Revealed, Calibrated, Dropped, Profiled, Made,
                                                 Failed, CompileRequest)}


class ProtocolViolation(Exception):
    """A rank said something the protocol does not allow."""


def parse_reply(message: dict[str, Any]) -> Reply:
    model = REPLIES.get(message.get("type")) if isinstance(message.get("type"), str) else None
    if model is None:
        raise ProtocolViolation(f"an unknown message type {str(message.get('type'))[:40]!r}")
    try:
        return model.model_validate(message)
    except ValidationError as error:
        first = error.errors()[0]
        raise ProtocolViolation(f"a malformed {model.__name__} message ({'.'.join(map(str, first['loc']))}: {first['msg']})") from None
