"""A reference rank: the problem's own program, run by the harness as judge and input maker.

Trusted code: it imports the problem (``make_inputs``, the reference). For each call the parent
names by a secret key it draws the call's inputs and writes them into a blob, the only form in
which a candidate ever sees them: on a GPU a device blob (``wire.write_device_blob``), whose
bytes stay in device memory, masked until the call begins (sandbox/rank/input_mask.py), in one
allocation lent to the candidate's rank and one that only this group stages from (a candidate
that writes what it was lent changes nothing anyone else reads); where the driver refuses device
blobs, a sealed memfd of the same masked bytes; off a GPU a sealed memfd. For
the calls the parent will check, it also runs the reference twice, in the problem's dtype and on
upcast inputs, and sends the upcast outputs (what a solution must match) with the native run's
own error (how far a solution may be off), the final state of any input the reference updates in
place (which a solution must then update the same way), and the inputs as made (what the judge
compares a rank's inputs with after the call). Those go to the parent alone, which copies them
out before it sends the next ``make``: as device memory where the parent compares on this rank's
GPU, else in memfds written again then (``wire.BlobPool``), never handed to a rank.
Timed like a candidate, through the same rounds, on the same blobs.

``python -m sandbox.harness.reference_rank CONFIG_JSON``; started by the parent outside any jail.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

import structlog

from sandbox.rank import device_share, input_mask, wire
from sandbox.rank.server import RankServer, flatten_outputs
from sandbox.rank.zygote import run_ranks

log = structlog.get_logger(__name__)

MAX_CALLS_PER_MAKE = wire.MAX_FDS // 5  # a call's descriptors: its inputs (three for a device blob), its expectation (two)
EXPECTED_POOL_BYTES = 2**29  # memfds of expected outputs kept for reuse, per reference rank (a timed round checks 1-4 calls)


INPUT_BLOBS = ("device", "memfd")


def input_blobs() -> str:
    """How a GPU reference hands inputs over: ``device`` memory where the driver shares it (the
    default), or ``memfd``, memory files always (``KLOOP_INPUT_BLOBS``: the path a driver without
    VMM takes, for checking it on a machine that has VMM). Any other value is ignored, with a warning."""
    chosen = os.environ.get("KLOOP_INPUT_BLOBS", "").strip() or "device"
    if chosen not in INPUT_BLOBS:
        log.warning("ignored: not device or memfd", variable="KLOOP_INPUT_BLOBS", value=chosen[:40])
        return "device"
    return chosen


class ReferenceServer(RankServer):
    role = "reference"

    def __init__(self, channel: wire.Channel, config: dict[str, Any]):
        from problems import load_ref

        super().__init__(channel, config)
        torch = self.torch
        self.problem = load_ref(config["problem_ref"])
        self.dtype = getattr(torch, config["dtype"])
        self.hi_dtype = torch.float64 if self.dtype in (torch.float32, torch.float64) else torch.float32
        self.shape = config["shape"]
        self.expected_blobs = wire.BlobPool(EXPECTED_POOL_BYTES)  # read by the parent only, before it asks for more
        # device blobs, until the driver refuses one (or the harness's environment asks for memory files)
        self.on_device = self.device.device.type == "cuda" and input_blobs() == "device"
        self.handlers["make"] = self.make

    def load(self, message: dict[str, Any], fds) -> tuple[dict, list]:
        message = {**message, "path": str(self.problem.reference_path),
                   "sys_path": [str(p) for p in self.problem.reference_sys_path]}
        return super().load(message, fds)

    # ---------------------------------------------------------------- inputs and expected outputs
    def _inputs(self, key: int, regime: int) -> tuple:
        torch = self.torch
        generator = torch.Generator(device=self.device.device)
        generator.manual_seed(key)
        with torch.no_grad():
            return self.problem.inputs(self.rank, self.world, generator, self.device.device, self.dtype, self.shape, regime)

    def make(self, message: dict[str, Any], _fds) -> tuple[dict, list]:
        """``calls``: [{key, regime, rng, expect, native, perturb, mask}]; per call an input blob (a
        device blob's header, lent and kept allocations where ``device``) and, where ``expect``,
        an expected-output blob (in that order).

        Every call's inputs are made before any expectation: a candidate's processes run while
        the reference makes the next round, and a checked call is the one that keeps the
        reference (its GPU, its CPU) busy for longer; made call by call, the order of the busy
        spells would tell a process that watches its own pace which of the round's calls are
        checked. This way it tells how many (about pipeline.CHECKED_SHARE of a round: no secret)."""
        calls = message["calls"]
        if len(calls) > MAX_CALLS_PER_MAKE:
            raise ValueError(f"{len(calls)} calls in one make (at most {MAX_CALLS_PER_MAKE}: the reply's descriptors are bounded)")
        self.expected_blobs.returned()  # the parent read the last make's expected outputs before it asked for this one
        held: list[list[int]] = [[] for _ in calls]
        described, made = [], {}
        try:
            for position, call in enumerate(calls):
                inputs = self._inputs(call["key"], int(call.get("regime", 0)))
                if call.get("perturb") is not None:
                    inputs = _perturbed(self.torch, inputs, call["perturb"], call["key"])
                tensors: list = []
                tree = wire.encode_tree(inputs, tensors)
                entry: dict[str, Any] = {"expect": bool(call.get("expect")), "device": False,
                                         "input_bytes": sum(t.numel() * t.element_size() for t in tensors)}
                held[position] += self._input_blob(tree, tensors, entry, call.get("mask"))
                described.append(entry)
                if call.get("expect"):
                    made[position] = tree, tensors
            for position, (tree, tensors) in made.items():
                call = calls[position]
                fds, summary = self._expected(tree, tensors, call["rng"], bool(call.get("native")))
                held[position] += fds
                described[position].update(summary)
        except BaseException:
            for fd in (fd for fds in held for fd in fds):
                wire_close(fd)
            raise
        return {"type": "made", "calls": described}, [fd for fds in held for fd in fds]

    def _input_blob(self, tree: Any, tensors: list, entry: dict[str, Any], mask: int | None) -> list[int]:
        """The call's input blob: made on a GPU, its inputs masked with ``mask``
        (sandbox/rank/input_mask.py), as a device blob in both copies (both groups remove the mask
        at the call), or a memfd blob where the driver refuses device blobs; off a GPU a memfd blob."""
        if self.device.device.type != "cuda":
            return [wire.write_blob(tree, tensors, name="inputs")]
        if not isinstance(mask, int):
            raise ValueError("inputs made on a GPU need their call's mask key")
        masked = input_mask.masked(self.torch, tensors, mask, self.rank)
        if self.on_device:
            try:
                fds = list(wire.write_device_blob(tree, masked, self.device.device.index or 0, copies=2))  # lent, kept
                entry["device"] = True
                return fds
            except device_share.DeviceShareError as error:  # no VMM here: memfd blobs from now on
                log.warning("device_blobs_refused", error=str(error))
                self.on_device = False
        return [wire.write_blob(tree, masked, name="inputs")]

    def _expected(self, tree: Any, leaves: list, rng: int, include_native: bool) -> tuple[list[int], dict[str, Any]]:
        from sandbox.harness.trees import nearly_constant

        torch = self.torch
        native_leaves = [t.detach().clone().requires_grad_(t.requires_grad) for t in leaves]
        native_inputs = wire.decode_tree(tree, native_leaves)
        self._prepare(rng)
        native = flatten_outputs(torch, self.fn(*native_inputs))
        self.device.synchronize()
        mutated = [i for i, (before, after) in enumerate(zip(leaves, native_leaves)) if not _same(torch, before, after)]
        if self.problem.spec.upcast:
            hi_leaves = self._copies(leaves, self.hi_dtype)
            hi_inputs = wire.decode_tree(tree, hi_leaves)
            self._prepare(rng)
            expected = flatten_outputs(torch, self.fn(*hi_inputs))
            self.device.synchronize()
        else:
            hi_leaves, expected = native_leaves, native
        magnitudes = self._magnitudes(tree, leaves, rng) if self.problem.spec.sum_of_products else []
        # what a solution must produce: the outputs, then every input the reference updates in place
        native_all = [*native, *(native_leaves[i] for i in mutated)]
        expected_all = [*expected, *(hi_leaves[i] for i in mutated)]
        for value in native_all + expected_all:
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"the reference returned a {type(value).__name__}, not tensors")
        max_errs, rms_errs, overflowed, kept = [], [], [], []
        for lo, hi in zip(native_all, expected_all):
            lo, hi = lo.detach(), hi.detach()
            if lo.is_floating_point() and self.problem.spec.upcast:
                error = native_error(torch, lo, hi)
                max_errs.append(error.max_abs)
                rms_errs.append(error.rms)
                overflowed.append(error.overflowed)
                kept.append(hi.to(self.hi_dtype))
            else:  # integers and booleans (indices, ranks, masks) must match the native run: upcasting reorders ties
                max_errs.append(0.0)
                rms_errs.append(0.0)
                overflowed.append(0)
                kept.append(lo if self.problem.spec.upcast else hi)
        summary = {"outputs": len(native), "mutated": mutated, "shapes": [list(t.shape) for t in native_all],
                   "dtypes": [str(t.dtype).removeprefix("torch.") for t in native_all],
                   "native_max_abs_err": _finite(max_errs), "native_rms_err": _finite(rms_errs), "native_overflowed": overflowed,
                   "nearly_constant_inputs": nearly_constant(tuple(leaves)), "inputs": len(leaves), "magnitudes": len(magnitudes)}
        tensors = kept + [t.detach() for t in leaves] + magnitudes + ([t.detach() for t in native_all] if include_native else [])
        if self.on_device and self.device.device.index == 0:  # where the parent compares: device memory it maps
            return list(wire.write_device_blob(len(kept), tensors, 0)), summary
        return [self.expected_blobs.write(len(kept), tensors, name="expected")], summary

    def _magnitudes(self, tree: Any, leaves: list, rng: int) -> list:
        """The reference's outputs on its inputs' magnitudes, in the upcast dtype (ProblemSpec.sum_of_products):
        each element's sum of the magnitudes of its terms. An element no finite bound is had for is infinite."""
        dtype = self.hi_dtype if self.problem.spec.upcast else None
        self._prepare(rng)
        outputs = flatten_outputs(self.torch, self.fn(*wire.decode_tree(tree, self._copies(leaves, dtype, absolute=True))))
        self.device.synchronize()
        return [o.detach().to(dtype or o.dtype).nan_to_num(nan=float("inf")) if o.is_floating_point() else o.detach()
                for o in outputs]

    @staticmethod
    def _copies(leaves: list, dtype: Any, absolute: bool = False) -> list:
        """Fresh copies of the call's input leaves, the floating ones in ``dtype`` (None: their own) and
        as magnitudes where ``absolute``; each keeps whether it requires grad."""
        return [(t.detach().abs() if absolute else t.detach()).to(dtype or t.dtype, copy=True).requires_grad_(t.requires_grad)
                if t.is_floating_point() else t.detach().clone() for t in leaves]


class NativeError(NamedTuple):
    max_abs: float
    rms: float
    overflowed: int  # elements one run made non-finite and the other did not (or not alike)


def native_error(torch, native, upcast) -> NativeError:
    """The native run's error against the upcast one, over the elements both runs made finite:
    its largest and its RMS; and how many elements only one of them made non-finite (the native
    run overflowed, say), which a solution may get non-finite too. Where both agree on a value no
    difference measures (both NaN, or the same infinity: a fully masked row's -inf) there is no
    error. Before, such elements made the error NaN (inf - inf: every solution's bound, and every
    solution, wrong) or infinite (an overflow: every solution's bound infinite, and any output
    right)."""
    if not native.numel():
        return NativeError(0.0, 0.0, 0)
    lo, hi = native.to(torch.float64), upcast.to(torch.float64)
    agree = (lo.isnan() & hi.isnan()) | (lo.isinf() & (lo == hi))
    both_finite = lo.isfinite() & hi.isfinite()
    diff = torch.where(both_finite, (lo - hi).abs(), torch.zeros_like(lo))
    return NativeError(float(diff.max()), float(diff.square().mean().sqrt()), int((~both_finite & ~agree).sum()))


def wire_close(fd: int) -> None:
    import os

    try:
        os.close(fd)
    except OSError:
        pass


def _finite(values: list[float]) -> list[float | str]:
    return [v if v == v and abs(v) != float("inf") else str(v) for v in values]


def _same(torch, x, y) -> bool:
    x, y = x.detach(), y.detach()
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if torch.equal(x, y):
        return True
    return x.is_floating_point() and torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(), y.nan_to_num())


def _perturbed(torch, inputs: tuple, index: int, seed: int) -> tuple:
    """``inputs`` with floating input ``index`` moved by noise as large as its own spread (problem
    lint: does the output depend on this input?). The noise depends on the seed and the index,
    not the rank, so an input every rank holds identically stays identical."""
    if not 0 <= index < len(inputs) or not (isinstance(inputs[index], torch.Tensor) and inputs[index].is_floating_point()):
        raise ValueError(f"input {index} is not a floating-point tensor; only those can be perturbed")
    x = inputs[index]
    generator = torch.Generator(device=x.device)
    generator.manual_seed((seed * 1_000_003 + index + 1) % 2**63)
    noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=torch.float32)
    spread = float(x.float().std()) if x.numel() > 1 else 0.0
    moved = (x.float() + noise * (spread if spread > 0 else 1.0)).to(x.dtype)
    return inputs[:index] + (moved,) + inputs[index + 1:]


def main(argv: list[str] | None = None) -> int:
    import json

    argv = sys.argv[1:] if argv is None else argv
    config = json.loads(argv[0])
    sys.path[:0] = [str(Path(p)) for p in config.get("import_path", [])]
    return run_ranks(config, ReferenceServer)


if __name__ == "__main__":
    sys.exit(main())
