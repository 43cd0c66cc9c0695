"""A rank's side of the harness protocol: it loads a module and calls its ``solution`` on the
inputs the parent stages, one call per ``go``, and answers in plain data (sandbox.rank.wire).

Every call looks the same to the code under test, whatever the parent will do with it: fresh
inputs staged from a blob, the global RNG seeded, the L2 flushed, ranks aligned, the call timed
between two device-wide syncs, and a checksum of its outputs and of its inputs' final state sent
back at once (a commitment: the parent later asks to see some calls' bytes and checks them against
it), with a sealed copy of the bytes committed to where the transposed scheme is the group's. In a
candidate's process all of this is hostile territory; the parent treats every number that comes
back as a claim (see sandbox/harness/timing.py).

Messages from the parent: load, stage, prime, call, calibrate, burst, reveal, drop, profile (a rank
ends when the parent kills its group). Replies: loaded, staged, primed, done, calibrated, burst_done,
revealed, dropped, profiled, failed; and compile (a request to the parent, answered by compiled).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from sandbox.rank import commitment, device_kernels, device_share, input_mask, wire
from sandbox.rank.device import RankDevice

MAX_INPUT_BLOB_BYTES = 64 * 2**30
MAX_PROFILE_EVENTS = 20_000
SEALING_REPLIES = ("done", "burst_done", "calibrated")  # replies that bring sealed copies of what was committed to


class RankServer:
    """Serves one rank. ``role`` is candidate or reference; subclasses add commands."""

    role = "candidate"

    def __init__(self, channel: wire.Channel, config: dict[str, Any]):
        self.channel = channel
        self.config = config
        self.rank, self.world = config["rank"], config["world"]
        self.fn = None
        self.rounds: dict[int, dict[str, Any]] = {}
        self._compile_ids = 0
        self.device = RankDevice(self.rank, self.world, config["mode"], config["store"], config["collectives"],
                                 on_cpu=config.get("on_cpu", False))
        self.torch = self.device.torch
        self.commitment_scheme = commitment.scheme(self.world, config["mode"])
        if self.device.cuda and config["mode"] == "cuda":  # the inputs' mask (every world) and the tree digest (one rank)
            device_kernels.warm()
        self.handlers = {"load": self.load, "stage": self.stage, "call": self.call, "burst": self.burst,
                         "reveal": self.reveal, "drop": self.drop, "profile": self.profile, "calibrate": self.calibrate, "prime": self.prime}

    # ---------------------------------------------------------------- the loop
    def serve(self) -> None:
        self.channel.send({"type": "ready", "rank": self.rank, "overhead_ms": self.device.overhead_ms,
                           "device_barrier": self.device.barrier is not None, "backend": self.device.backend,
                           "flush_ms": self.device.flush_ms, "walled_off": bool(self.config.get("walled_off"))})
        while True:
            try:
                message, fds = self.channel.recv()
            except wire.ChannelClosed:
                return
            handler = self.handlers.get(message.get("type"))
            try:
                if handler is None:
                    raise wire.WireError(f"unknown command {str(message.get('type'))[:40]!r}")
                reply, reply_fds = handler(message, fds)
            except BaseException as error:  # noqa: BLE001 - every failure goes back to the parent
                reply, reply_fds = self._failure(error), []
            finally:
                for fd in fds:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self.channel.send(reply, reply_fds)
            for fd in reply_fds:
                os.close(fd)
            if reply_fds and reply["type"] in SEALING_REPLIES:
                commitment.allocate_ahead()  # outside any call's clock: while the parent reads this reply

    def _failure(self, error: BaseException) -> dict[str, Any]:
        from kloop_runtime import CompileError

        text = traceback.format_exc()
        if isinstance(error, CompileError):
            return {"type": "failed", "kind": "build", "message": str(error).splitlines()[0][:500], "text": error.log[-50_000:]}
        kind = "build" if self.fn is None else "call"
        return {"type": "failed", "kind": kind, "message": f"{type(error).__name__}: {error}"[:500], "text": text[-50_000:]}

    # ---------------------------------------------------------------- load
    def load(self, message: dict[str, Any], _fds) -> tuple[dict, list]:
        from kloop_runtime import channel

        channel.install_remote(self._compile_remote)
        path = Path(message["path"])
        for entry in reversed(message.get("sys_path", [])):
            sys.path.insert(0, entry)
        spec = importlib.util.spec_from_file_location(f"kloop_{self.role}_solution", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path.name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        fn = getattr(module, "solution", None)
        if not callable(fn):
            raise AttributeError(f"{path.name} defines no function `solution`")
        self.fn = fn
        return {"type": "loaded"}, []

    def _compile_remote(self, kind: str, payload: dict[str, Any]) -> tuple[bool, str, str]:
        self._compile_ids += 1
        self.channel.send({"type": "compile", "id": self._compile_ids, "kind": kind, "payload": _jsonable(payload)})
        reply, fds = self.channel.recv()
        for fd in fds:
            os.close(fd)
        if reply.get("type") != "compiled" or reply.get("id") != self._compile_ids:
            raise RuntimeError("harness protocol error: expected a compile reply")
        return bool(reply["ok"]), str(reply.get("path", "")), str(reply.get("log", ""))

    # ---------------------------------------------------------------- calls
    def stage(self, message: dict[str, Any], fds: list[int]) -> tuple[dict, list]:
        """Inputs of a round's calls, one blob each (a device blob followed by its device memory),
        made into tensors on this rank's device; with ``shared`` (CPU only), views of the parent's
        own copies, which it compares after the call with what it staged (a rank cannot hide a
        write to its inputs by what it says). Where the parent says ``masked`` (both of those, and a
        memfd blob made on a GPU whose driver refused device blobs) they come masked
        (sandbox/rank/input_mask.py): their tensors become inputs only when their call's message
        brings the key (a shared copy is unmasked in place, where the parent reads it)."""
        calls = []
        shared, masked = bool(message.get("shared")), bool(message.get("masked"))
        given = iter(fds)
        for fd in given:
            with wire.Blob(fd, MAX_INPUT_BLOB_BYTES, shared=shared) as blob:
                device_fd = next(given, None) if blob.device_bytes is not None else None
                tensors = blob.tensors(None if shared else self.device.device, device_fd)
                calls.append({"tree": blob.tree, "leaves": tensors, "masked": masked,
                              "inputs": None if masked else wire.decode_tree(blob.tree, tensors)})
        self.device.synchronize()
        self.rounds[message["round"]] = {"calls": calls, "outputs": {}}
        return {"type": "staged", "round": message["round"], "calls": len(calls)}, []

    def _unmasked(self, entry: dict[str, Any], mask: Any) -> Any:
        """A staged call's inputs, its mask removed with ``mask`` (the call's key) the first time."""
        if entry["masked"]:
            if not isinstance(mask, int) or isinstance(mask, bool):
                raise wire.WireError("a masked call without its key")
            input_mask.apply(self.torch, entry["leaves"], mask, self.rank)
            entry["masked"] = False
            entry["inputs"] = wire.decode_tree(entry["tree"], entry["leaves"])
        return entry["inputs"]

    def prime(self, message: dict[str, Any], _fds) -> tuple[dict, list]:
        """The warm-up before a timed call: the L2 flush repeated ``flushes`` times (the GPU busy,
        not idle, when the call starts), then a sync. Outside the parent's clock, and worth nothing
        to skip: no input of the next call can be read before that call's message (input_mask)."""
        self.device.flush_l2(int(message.get("flushes", 0)))
        self.device.synchronize()
        return {"type": "primed"}, []

    def _prepare(self, rng: int) -> None:
        seed_global_rng(self.torch, rng, self.device.cuda)

    def call(self, message: dict[str, Any], _fds) -> tuple[dict, list]:
        """One call of a staged round: its inputs unmasked, the L2 flushed once, timed, committed.
        With ``ahead`` (the parent asks it of the reference only), its device time with its launch
        hidden behind ``ahead`` flushes (``RankDevice.timed_ahead``)."""
        current = self.rounds[message["round"]]
        index = message["index"]
        entry = current["calls"][index]
        inputs = self._unmasked(entry, message.get("mask"))
        self._prepare(message["rng"])
        ahead = message.get("ahead")
        if isinstance(ahead, int) and not isinstance(ahead, bool) and ahead > 0:
            result, ms = self.device.timed_ahead(lambda: self.fn(*inputs), ahead)
        else:
            if message.get("flush", True):
                self.device.flush_l2(1)
            result, ms = self.device.timed(lambda: self.fn(*inputs))
        leaves = self._output_leaves(result)
        current["outputs"][index] = leaves
        checksum = self._commitment(leaves, entry["leaves"], message["nonce"])
        return {"type": "done", "round": message["round"], "index": index, "ms": ms, "checksum": checksum}, \
            self._sealed(message["nonce"])

    def calibrate(self, message: dict[str, Any], _fds) -> tuple[dict, list]:
        """A timed call's harness work with no solution in it (the unmasking, the flush, an empty
        timed interval, the commitment to outputs of ``output_bytes`` and to the staged inputs):
        the parent asks for it before any candidate code is loaded, to learn what that work costs
        in this process."""
        entry = self.rounds[message["round"]]["calls"][message["index"]]
        self._unmasked(entry, message.get("mask"))
        stand_in = self.torch.ones(int(message["output_bytes"]), dtype=self.torch.uint8, device=self.device.device)
        if message.get("flush", True):
            self.device.flush_l2(1)
        _, ms = self.device.timed(lambda: None)
        self._commitment([stand_in], entry["leaves"], message["nonce"])
        return {"type": "calibrated", "round": message["round"], "index": message["index"], "ms": ms}, self._sealed(message["nonce"])

    def burst(self, message: dict[str, Any], _fds) -> tuple[dict, list]:
        """The round's calls from ``start`` on, back to back: no host sync, no barrier between them."""
        current = self.rounds[message["round"]]
        start = message["start"]
        entries = current["calls"][start:]
        inputs = [self._unmasked(entry, message["mask"][index]) for index, entry in enumerate(entries, start=start)]
        self.device.synchronize()
        results = []
        for index in range(start, len(current["calls"])):
            self._prepare(message["rng"][index])
            results.append(self.fn(*inputs[index - start]))
        self.device.synchronize()
        checksums, sealed = [], []
        try:
            for index, result in enumerate(results, start=start):
                leaves = self._output_leaves(result)
                current["outputs"][index] = leaves
                checksums.append(self._commitment(leaves, current["calls"][index]["leaves"], message["nonce"][index]))
                sealed += self._sealed(message["nonce"][index])
        except BaseException:
            for fd in sealed:
                os.close(fd)
            raise
        return {"type": "burst_done", "round": message["round"], "checksums": checksums}, sealed

    def _output_leaves(self, result: Any) -> list:
        """The outputs as the tensors committed to and shown: exactly torch.Tensor, detached, and
        with any conjugate or negative bit resolved. A tensor with one of those bits set (``.imag``
        of a conjugated complex tensor has the negative bit) holds in its storage bytes that are not
        its value, and the commitment and the blob read bytes (viewed as uint8, which torch refuses
        for such a tensor): an honest output crashed the rank instead of being judged by its value
        (tests/fixtures/honest/all_reduce_neg_bit_view_output.py; the storage of one whose value is
        wrong must not pass either: tests/fixtures/hostile/neg_bit_output_view.py)."""
        leaves = flatten_outputs(self.torch, result)
        for leaf in leaves:
            if type(leaf) is not self.torch.Tensor:  # noqa: E721 - exactly a tensor, no subclass
                raise TypeError(f"solution returned a {type(leaf).__name__}; outputs must be torch.Tensor")
        return [leaf.detach().resolve_conj().resolve_neg() for leaf in leaves]

    def _commitment(self, outputs: list, inputs: list, nonce: str) -> str:
        return commitment.commitment([*outputs, *inputs], self.commitment_scheme, bytes.fromhex(nonce), seal=True)

    @staticmethod
    def _sealed(nonce: str) -> list[int]:
        """The sealed copy of what the call's commitment hashed, sent with the reply (the transposed
        scheme's; none for the tree's): the parent checks it sealed when the reply arrives, and
        compares it with what the rank shows when asked (sandbox/harness/judge.py)."""
        fd = commitment.take_sealed(bytes.fromhex(nonce))
        return [] if fd is None else [fd]

    def reveal(self, message: dict[str, Any], _fds) -> tuple[dict, list]:
        """The outputs and the inputs' final state of some calls of a round, one blob per call: a
        device blob where the parent reads them onto the device to hash them (a one-rank cuda
        group's tree commitment), 64 MiB in 1-2 ms instead of 60-80 through a fresh memfd."""
        current = self.rounds[message["round"]]
        on_device = self.commitment_scheme == "tree" and self.device.cuda and 2 * len(message["indices"]) <= wire.MAX_FDS
        blobs = []
        try:
            for index in message["indices"]:
                outputs = current["outputs"][index]
                tensors = [*outputs, *current["calls"][index]["leaves"]]  # the tree: the output count
                if on_device:
                    try:
                        blobs += wire.write_device_blob(len(outputs), tensors, self.device.device.index or 0)
                        continue
                    except device_share.DeviceShareError:  # a driver without shareable allocations: memfds it is
                        on_device = False
                blobs.append(wire.write_blob(len(outputs), tensors, name="reveal"))
        except BaseException:
            for fd in blobs:
                os.close(fd)
            raise
        return {"type": "revealed", "round": message["round"], "indices": list(message["indices"])}, blobs

    def drop(self, message: dict[str, Any], _fds) -> tuple[dict, list]:
        self.rounds.pop(message["round"], None)
        return {"type": "dropped", "round": message["round"]}, []

    # ---------------------------------------------------------------- profile
    def profile(self, message: dict[str, Any], _fds) -> tuple[dict, list]:
        """A few calls of a staged round under the torch profiler: the device activities (name,
        start, end) and the host wall time of each call."""
        from torch.profiler import ProfilerActivity, profile

        current = self.rounds[message["round"]]
        inputs = [self._unmasked(entry, key) for entry, key in zip(current["calls"], message["mask"], strict=True)]
        self._prepare(message["rng"])
        self.fn(*inputs[0])  # warm
        self.device.synchronize()
        walls = []
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for args in inputs[1:]:
                _, ms = self.device.timed(lambda args=args: self.fn(*args))
                walls.append(ms)
        return {"type": "profiled", "round": message["round"], "calls": len(walls), "wall_ms": walls,
                "activities": device_activities(self.torch, prof)[:MAX_PROFILE_EVENTS]}, []


def seed_global_rng(torch, rng: int, cuda: bool) -> None:
    """The global RNG a call may draw from, seeded with the call's ``rng``: the same state for the
    reference's call and the candidate's (a reference may draw from it). The CPU generator and, on a
    GPU, the device's; not ``torch.manual_seed``, which also queues a seed for every device kind torch
    was built for and, where that device is not initialised (any CPU rank), records a stack trace
    for it each time: on a two-core host about 0.3 ms a call (a warm CPU evaluation's calls of both
    groups, about 250, took 0.07-0.09 s instead of 0.13-0.15 s)."""
    torch.random.default_generator.manual_seed(rng)
    if cuda:
        torch.cuda.manual_seed_all(rng)


def flatten_outputs(torch, result: Any) -> list:
    """Output leaves in order: lists and tuples unrolled, dicts by sorted key, Python numbers as
    0-d tensors (what ``torch.tensor`` makes of them), ``None`` dropped; anything else kept as it
    is (and refused by the caller)."""
    if result is None:
        return []
    if isinstance(result, (tuple, list)):
        return [leaf for item in result for leaf in flatten_outputs(torch, item)]
    if isinstance(result, dict):
        return [leaf for key in sorted(result, key=str) for leaf in flatten_outputs(torch, result[key])]
    if isinstance(result, (bool, int, float)):
        return [torch.tensor(result)]
    return [result]


def device_activities(torch, prof) -> list[list]:
    """``[name, start_us, end_us]`` of every kernel, memcpy and memset the profiler saw on the device."""
    cuda = getattr(getattr(torch.autograd, "DeviceType", None), "CUDA", None)
    found = []
    try:
        events = prof.events() or ()
    except Exception:  # noqa: BLE001 - a profiler without raw events
        return []
    for event in events:
        if cuda is None or getattr(event, "device_type", None) != cuda:
            continue
        span = getattr(event, "time_range", None)
        if span is not None and span.end > span.start:
            found.append([str(event.name)[:300], float(span.start), float(span.end)])
    return found


def _jsonable(payload: dict[str, Any]) -> dict[str, Any]:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in payload.items()}
