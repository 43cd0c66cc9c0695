"""One rank process: sets up the device and process group, loads the reference or the
candidate, and answers the parent's commands (trials, timing, profile) over a private pipe.

Everything here runs before the candidate module is imported, except the calls into it; the
functions the harness relies on (timers, events, synchronisation) are bound at import time so a
candidate that patches ``torch`` later does not change how it is measured.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from sandbox.harness import protocol as p
from sandbox.harness.trees import clone_inputs, flatten_outputs, map_tensors, modified_inputs, nearly_constant, tensor_leaves, upcast_inputs

_perf_counter = time.perf_counter


def main(conn, args: p.WorkerArgs) -> None:
    os.setpgid(0, 0)  # the parent kills the rank and anything it started as one group
    _die_with_parent()
    sys.dont_write_bytecode = True  # lazy imports must not write into the (unwritable) installation
    log_fd = os.open(args.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    os.environ.update(args.env)
    # torchrun's variables, which code written for torchrun launches (ParallelKernelBench's) reads
    local_rank = 0 if args.device_mode == "emulate" else args.rank
    os.environ.update(RANK=str(args.rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(args.world))
    try:
        rank = _Rank(conn, args)
    except BaseException:  # noqa: BLE001 - report set-up failures instead of dying silently
        conn.send(p.Failed(rank=args.rank, kind="harness", message="rank set-up failed", text=traceback.format_exc()))
        return
    rank.serve()


class _Rank:
    def __init__(self, conn, args: p.WorkerArgs):
        import torch
        import torch.distributed as dist

        from problems.registry import load_ref

        self.conn, self.args = conn, args
        self.torch, self.dist = torch, dist
        self.problem = load_ref(args.problem_ref)
        self.dtype = getattr(torch, args.dtype)
        self.hi_dtype = torch.float64 if self.dtype in (torch.float32, torch.float64) else torch.float32
        if args.device_mode == "cpu":
            self.device = torch.device("cpu")
            # ranks share the host's cores: more intra-op threads than cores makes OpenMP spin-waits
            # take turns, and a small einsum 10x slower
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.world))
        else:
            index = args.rank if args.device_mode == "cuda" else 0
            self.device = torch.device("cuda", index)
            torch.cuda.set_device(self.device)
        store = dist.TCPStore("127.0.0.1", args.store_port, args.world, is_master=False, timeout=_timedelta(120))
        backend = "nccl" if args.device_mode == "cuda" else "gloo"
        dist.init_process_group(backend, store=store, rank=args.rank, world_size=args.world, timeout=_timedelta(600))
        self.barrier_group = dist.new_group(backend="gloo") if backend == "nccl" else None
        self._event_cls = torch.cuda.Event
        self._elapsed = torch.cuda.Event.elapsed_time
        self._sync = torch.cuda.synchronize
        self._barrier = dist.barrier
        self.fn = None
        self.guard = None
        self.isolation: tuple[str, ...] = ()
        self._compile_ids = 0
        conn.send(p.Ready(rank=args.rank))

    # ------------------------------------------------------------------ plumbing
    def serve(self) -> None:
        handlers = {p.Load: self.load, p.RunTrials: self.run_trials, p.TimeCalls: self.time_calls, p.Profile: self.profile}
        while True:
            try:
                command = self.conn.recv()
            except EOFError:
                return
            if isinstance(command, p.Exit):
                self._shutdown()
                return
            try:
                payload = handlers[type(command)](command)
                self.conn.send(p.Done(rank=self.args.rank, payload=payload, violations=self._violations()))
            except BaseException as error:  # noqa: BLE001 - every failure goes back to the parent
                self.conn.send(self._failure(error))

    def _failure(self, error: BaseException) -> p.Failed:
        from kloop_runtime.build import CompileError

        text = traceback.format_exc()
        violations = self._violations()
        if violations:
            return p.Failed(self.args.rank, "violation", violations[0], text, violations)
        if isinstance(error, CompileError):
            return p.Failed(self.args.rank, "build", str(error).splitlines()[0], error.log)
        kind = "build" if self.fn is None else "call"
        return p.Failed(self.args.rank, kind, f"{type(error).__name__}: {error}"[:500], text)

    def _violations(self) -> tuple[str, ...]:
        return tuple(self.guard.violations) if self.guard else ()

    def _shutdown(self) -> None:
        try:
            if self.device.type == "cuda":
                self._sync()
            self.dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the process is about to exit
            pass

    def _compile_remote(self, kind: str, payload: dict[str, Any]) -> tuple[bool, str, str]:
        self._compile_ids += 1
        self.conn.send(p.CompileRequest(self._compile_ids, kind, payload))
        reply = self.conn.recv()
        if not isinstance(reply, p.CompileReply) or reply.request_id != self._compile_ids:
            raise RuntimeError("harness protocol error: expected a compile reply")
        return reply.ok, reply.path, reply.log

    # ------------------------------------------------------------------ stages
    def load(self, _: p.Load) -> dict[str, Any]:
        from problems.spec import load_module
        from kloop_runtime import channel

        channel.install_remote(self._compile_remote)
        if self.args.role == "candidate":
            from sandbox.harness.confine import confine

            os.chdir(self.args.workdir)
            self.guard, measures = confine(self.args.workdir, self.args.compile_cache, self.args.readable_paths)
            self.isolation = tuple(measures)
            sys.path.insert(0, str(self.args.workdir))
            if self.problem.compat == "pkb":  # candidates written for ParallelKernelBench import its utils.cuda_helpers
                from kloop_runtime import pkb_shim

                sys.path.insert(1, str(pkb_shim.ROOT))
        else:
            sys.path[0:0] = [str(path) for path in self.problem.reference_sys_path]
        module = load_module(self.args.module_path, f"kloop_{self.args.role}_solution")
        fn = getattr(module, "solution", None)
        if not callable(fn):
            raise AttributeError(f"{self.args.module_path.name} defines no function `solution`")
        self.fn = fn
        return {"isolation": self.isolation}

    def _inputs(self, seed: int) -> tuple:
        generator = self.torch.Generator(device=self.device)
        generator.manual_seed(seed)
        with self.torch.no_grad():
            return tuple(self.problem.make_inputs(self.args.rank, self.args.world, generator, self.device, self.dtype, **self.args.shape))

    def _call(self, inputs: tuple):
        with self.torch.no_grad():
            return self.fn(*inputs)

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            self._sync(self.device)

    def _host_barrier(self) -> None:
        self._barrier(group=self.barrier_group) if self.barrier_group is not None else self._barrier()

    def run_trials(self, command: p.RunTrials) -> list:
        if self.args.role == "reference":
            perturb = list(command.perturb) + [None] * (len(command.seeds) - len(command.perturb))
            return [self._reference_trial(seed, command.include_native, index) for seed, index in zip(command.seeds, perturb)]
        return self._candidate_trials(command)

    def _reference_trial(self, seed: int, include_native: bool = False, perturb: int | None = None) -> p.ReferenceOutput:
        torch = self.torch
        inputs = self._inputs(seed)
        if perturb is not None:
            inputs = _perturbed(torch, inputs, perturb, seed)
        if self.args.device_mode == "emulate":
            # gloo lacks several collectives for CUDA tensors; the reference is the judge, not the
            # subject, so in emulation it runs on the CPU (inputs drawn on the GPU, as the candidate's)
            inputs = map_tensors(inputs, lambda x: x.cpu(), lambda m: m.cpu())
        constant = nearly_constant(inputs)
        native = flatten_outputs(self._call(inputs))
        self._synchronize()
        if self.problem.spec.upcast:
            expected = flatten_outputs(self._call(upcast_inputs(inputs, self.hi_dtype)))
        else:
            expected = native
        self._synchronize()
        max_errs, rms_errs, cpu = [], [], []
        for lo, hi in zip(native, expected):
            if not isinstance(lo, torch.Tensor) or not isinstance(hi, torch.Tensor):
                raise TypeError(f"the reference returned a {type(lo).__name__}, not tensors")
            if _is_float(torch, lo) and self.problem.spec.upcast:
                diff = (lo.to(torch.float64) - hi.to(torch.float64)).abs()
                max_errs.append(float(diff.max()) if diff.numel() else 0.0)
                rms_errs.append(float(diff.square().mean().sqrt()) if diff.numel() else 0.0)
                cpu.append(p.PackedTensor.of(hi.to(self.hi_dtype)))
            else:
                max_errs.append(0.0)
                rms_errs.append(0.0)
                cpu.append(p.PackedTensor.of(hi))
        return p.ReferenceOutput(
            expected=cpu, shapes=[tuple(t.shape) for t in native], dtypes=[str(t.dtype).removeprefix("torch.") for t in native],
            native_max_abs_err=max_errs, native_rms_err=rms_errs,
            native=[p.PackedTensor.of(t) for t in native] if include_native else None, nearly_constant_inputs=constant,
        )

    def _candidate_trials(self, command: p.RunTrials) -> list[p.CandidateOutput]:
        """One call per seed in order (a seed may repeat: the stress stage cycles through a few);
        the first ``isolated_calls`` with a host sync around them, the rest back-to-back."""
        torch = self.torch
        inputs_by_seed = {seed: self._inputs(seed) for seed in dict.fromkeys(command.seeds)}
        clones = {seed: clone_inputs(inputs) for seed, inputs in inputs_by_seed.items()}
        _poison_free_memory(torch, self.device)
        self._synchronize()
        self._host_barrier()
        results = []
        for index, seed in enumerate(command.seeds):
            isolated = index < command.isolated_calls
            if isolated:
                self._synchronize()
                self._host_barrier()
            results.append(self._call(inputs_by_seed[seed]))
            if isolated:
                self._synchronize()
        self._synchronize()
        modified = {seed: modified_inputs(inputs_by_seed[seed], clones[seed]) for seed in inputs_by_seed}
        outputs = []
        for seed, result in zip(command.seeds, results):
            leaves = flatten_outputs(result)
            outputs.append(p.CandidateOutput(outputs=[_to_cpu(torch, leaf) for leaf in leaves], modified_inputs=modified[seed]))
            for leaf in leaves:
                _poison(torch, leaf)
        self._synchronize()
        return outputs

    def time_calls(self, command: p.TimeCalls) -> dict[str, Any]:
        """Per-iteration times: every rank aligned by a barrier, device-wide sync after the
        call (so work on side streams counts), minus the measured cost of the sync itself."""
        input_sets = [self._inputs(command.seed)]
        set_bytes = sum(x.numel() * x.element_size() for x in tensor_leaves(input_sets[0]))
        while len(input_sets) < 8 and (len(input_sets) < 2 or len(input_sets) * set_bytes < command.rotate_bytes):
            input_sets.append(self._inputs(command.seed + len(input_sets)))
        timer = self._cuda_interval if self.device.type == "cuda" else self._cpu_interval
        deadline = _perf_counter() + command.budget_s
        for i in range(command.warmup):
            self._call(input_sets[i % len(input_sets)])
        self._synchronize()
        overhead = sorted(timer(None) for _ in range(21))[10]  # once warm: clocks up, the timing path's code hot
        times = []
        for i in range(command.iterations):
            times.append(max(timer(input_sets[i % len(input_sets)]) - overhead, 0.0))
            if _perf_counter() > deadline and len(times) >= 10:
                break
        return {"times_ms": times, "overhead_ms": overhead, "input_sets": len(input_sets)}

    def _cuda_interval(self, inputs) -> float:
        self._host_barrier()
        self._sync(self.device)
        start, end = self._event_cls(enable_timing=True), self._event_cls(enable_timing=True)
        start.record()
        if inputs is not None:
            self._call(inputs)
        self._sync(self.device)
        end.record()
        end.synchronize()
        return self._elapsed(start, end)

    def _cpu_interval(self, inputs) -> float:
        self._host_barrier()
        start = _perf_counter()
        if inputs is not None:
            self._call(inputs)
        return (_perf_counter() - start) * 1000.0

    def profile(self, command: p.Profile) -> dict[str, Any]:
        from sandbox.harness.profiling import profile_calls

        inputs = self._inputs(command.seed)

        def align() -> None:
            self._host_barrier()
            self._synchronize()

        return profile_calls(self.torch, lambda: self._call(inputs), self._synchronize, command.iterations, align, self.args.rank)


def _die_with_parent() -> None:
    if sys.platform == "linux":
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _timedelta(seconds: float):
    from datetime import timedelta

    return timedelta(seconds=seconds)


def _is_float(torch, x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _perturbed(torch, inputs: tuple, index: int, seed: int) -> tuple:
    """``inputs`` with floating input ``index`` moved by noise as large as its own spread (problem
    lint: does the output depend on this input?). The noise depends on the seed and the index, not
    the rank, so an input that every rank holds identically stays identical."""
    if not 0 <= index < len(inputs) or not _is_float(torch, inputs[index]):
        raise ValueError(f"input {index} is not a floating-point tensor; only those can be perturbed")
    x = inputs[index]
    generator = torch.Generator(device=x.device)
    generator.manual_seed((seed * 1_000_003 + index + 1) % 2**63)
    noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=torch.float32)
    spread = float(x.float().std()) if x.numel() > 1 else 0.0
    moved = (x.float() + noise * (spread if spread > 0 else 1.0)).to(x.dtype)
    return inputs[:index] + (moved,) + inputs[index + 1:]


def _to_cpu(torch, leaf):
    if isinstance(leaf, torch.Tensor):
        return p.PackedTensor.of(leaf)
    return f"<{type(leaf).__name__}>"


def _poison(torch, leaf) -> None:
    """Overwrite a returned tensor so a later call that reuses it without writing every
    element shows NaNs (or -1), not the previous call's correct values."""
    if isinstance(leaf, torch.Tensor) and leaf.numel():
        try:
            leaf.fill_(float("nan") if leaf.is_floating_point() else -1)
        except RuntimeError:
            pass


def _poison_free_memory(torch, device) -> None:
    """Fill the allocator's cached free blocks with NaN bytes, so reading an uninitialised
    output buffer gives NaN rather than stale correct data."""
    if device.type != "cuda":
        return
    stats = torch.cuda.memory_stats(device)
    free = stats.get("reserved_bytes.all.current", 0) - stats.get("allocated_bytes.all.current", 0)
    held, chunk = [], 1 << 30
    while free > (1 << 20) and chunk >= (1 << 20):
        try:
            block = torch.empty(min(chunk, free), dtype=torch.uint8, device=device)
        except torch.OutOfMemoryError:
            chunk //= 2
            continue
        block.fill_(0xFF)
        held.append(block)
        free -= block.numel()
        if block.numel() < chunk:
            chunk //= 2
    del held
