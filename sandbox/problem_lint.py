"""The problem lint: is a problem fit to judge candidates? Checks one problem at one world size.

A problem that passes runs its reference on every declared world size, gives outputs that are
finite, non-constant and depend on the seed and on every floating input, and has tolerances
tight enough that a small error in one element, or the whole output off by 2%, is caught by
``sandbox.harness.compare.compare_outputs``, while a second run of the reference passes. Where
the problem declares several input regimes, the outputs of each are checked to be finite and
non-constant, and each regime's tolerance (the native reference's error there) to catch those
errors.

The reference runs through the trusted harness (``sandbox.harness.reference_outputs.run_reference``), once
per call of :func:`lint_problem`: every seed and perturbation is one trial of that run. The
inputs are also checked directly, in this process (``make_inputs`` needs no process group).
"""

from __future__ import annotations

import keyword
import math
import time
from typing import Any

from pydantic import BaseModel, Field, computed_field

from problems.contract import CATEGORIES, Cost, Problem

DEFAULT_SEEDS = (20_240_601, 77_777)
ELEMENT_ERROR = 0.05  # one element moved by this fraction of the output's max-abs must fail
SCALE_ERROR = 1.02  # the whole output scaled by this (or by 1 + eps where eps > 2%, float8) must fail


class LintCheck(BaseModel):
    name: str
    ok: bool
    message: str = ""


class LintResult(BaseModel):
    """Every check run on one problem at one world size; ``failures`` are the ones that failed."""

    problem: str
    world: int
    size: str
    wall_s: float = 0.0
    checks: list[LintCheck] = Field(default_factory=list)

    @computed_field
    @property
    def failures(self) -> list[LintCheck]:
        return [check for check in self.checks if not check.ok]

    @computed_field
    @property
    def ok(self) -> bool:
        return not self.failures

    def add(self, name: str, problems: list[str]) -> bool:
        """Record check ``name``: it passed when ``problems`` is empty (the first few are kept)."""
        message = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        self.checks.append(LintCheck(name=name, ok=not problems, message=message))
        return not problems


def lint_problem(problem: Problem, world: int, size: str = "small", seeds: tuple[int, int] = DEFAULT_SEEDS,
                 timeout_s: float = 300.0) -> LintResult:
    """Check ``problem`` at ``world`` ranks on CPU (gloo) at the named ``size``."""
    started = time.monotonic()
    result = LintResult(problem=problem.name, world=world, size=size)
    try:
        _check_spec(problem, world, size, result)
        if not result.ok:
            return result
        floating = _check_inputs(problem, world, size, seeds, result)
        _check_regimes(problem, world, size, seeds[0], result)
        if floating is not None:
            _check_reference(problem, world, size, seeds, floating, timeout_s, result)
        return result
    finally:
        result.wall_s = round(time.monotonic() - started, 3)


# ---------------------------------------------------------------------- static


def _is_name(text: Any) -> bool:
    return isinstance(text, str) and text.isidentifier() and not keyword.iskeyword(text)


def _check_spec(problem: Problem, world: int, size: str, result: LintResult) -> None:
    spec = problem.spec
    names = []
    if not _is_name(spec.name) or spec.name != spec.name.lower():
        names.append(f"problem name {spec.name!r} is not a lowercase identifier")
    if problem.folder.name != spec.name:
        names.append(f"the folder is {problem.folder.name!r} but the spec names {spec.name!r}")
    if problem.folder.parent.name != spec.category:
        names.append(f"the category is {spec.category!r} but the problem lives under {problem.folder.parent.name}/ "
                     f"(one of {', '.join(CATEGORIES)})")
    for shape_name, shape in spec.shapes.items():
        if not _is_name(shape_name):
            names.append(f"shape name {shape_name!r} is not an identifier")
        names += [f"shape {shape_name}: argument {arg!r} is not an identifier" for arg in shape if not _is_name(arg)]
    result.add("names", names)

    sizes = []
    if world not in spec.world_sizes:
        sizes.append(f"world {world} is not one of the declared world sizes {spec.world_sizes}")
    if size not in spec.shapes:
        sizes.append(f"no shape named {size!r}; the spec has {sorted(spec.shapes)}")
    result.add("world_and_size", sizes)

    costs = []
    for shape_name in spec.shapes:
        try:
            cost = problem.cost_at(world, shape_name, spec.dtype)  # as the harness asks for it: the problem's dtype
        except Exception as error:  # noqa: BLE001 - a broken cost model is a lint failure
            costs.append(f"cost(world={world}, **{shape_name}) raised {type(error).__name__}: {error}")
            continue
        if not isinstance(cost, Cost):
            costs.append(f"cost(**{shape_name}) returned {type(cost).__name__}, not Cost")
            continue
        values = cost.model_dump()
        if any(not math.isfinite(v) or v < 0 for v in values.values()):
            costs.append(f"cost(**{shape_name}) has a negative or non-finite field: {values}")
        if world > 1 and cost.comm_bytes <= 0:
            costs.append(f"cost(world={world}, **{shape_name}).comm_bytes is {cost.comm_bytes}: ranks must move bytes")
        if cost.hbm_bytes <= 0:
            costs.append(f"cost(**{shape_name}).hbm_bytes is {cost.hbm_bytes}")
    result.add("cost_model", costs)


# ---------------------------------------------------------------------- inputs


def _make_inputs(problem: Problem, world: int, size: str, rank: int, seed: int, regime: int = 0) -> tuple:
    import torch

    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    with torch.no_grad():
        return problem.inputs(rank, world, generator, torch.device("cpu"), getattr(torch, problem.spec.dtype), problem.shape(size),
                              regime)


def _check_regimes(problem: Problem, world: int, size: str, seed: int, result: LintResult) -> None:
    """Each declared input regime draws, and draws something other than the first one does."""
    import torch

    if problem.spec.regimes == 1:
        return
    try:
        drawn = [[_make_inputs(problem, world, size, rank, seed, regime) for rank in range(world)]
                 for regime in range(problem.spec.regimes)]
    except Exception as error:  # noqa: BLE001 - a regime that cannot be drawn is a lint failure
        result.add("inputs_regimes", [f"make_inputs(regime=...) raised {type(error).__name__}: {error}"])
        return
    result.add("inputs_regimes", [
        f"regime {regime} draws the same inputs as regime 0" for regime in range(1, problem.spec.regimes)
        if all(torch.equal(x, y) for rank in range(world) for x, y in zip(drawn[0][rank], drawn[regime][rank]))])


def _check_inputs(problem: Problem, world: int, size: str, seeds: tuple[int, int], result: LintResult) -> list[int] | None:
    """Checks ``make_inputs`` in this process; returns the indices of the floating inputs (None
    when the inputs are too broken to run the reference)."""
    import torch

    try:
        per_seed = [[_make_inputs(problem, world, size, rank, seed) for rank in range(world)] for seed in seeds]
        again = [_make_inputs(problem, world, size, rank, seeds[0]) for rank in range(world)]
    except Exception as error:  # noqa: BLE001 - a broken generator is a lint failure
        result.add("inputs_build", [f"make_inputs raised {type(error).__name__}: {error}"])
        return None
    first = per_seed[0]
    kinds = []
    if not first[0]:
        kinds.append("make_inputs returned no inputs")
    for rank, inputs in enumerate(first):
        kinds += [f"rank {rank}: input {i} is a {type(x).__name__}, not a tensor" for i, x in enumerate(inputs)
                  if not isinstance(x, torch.Tensor)]
        if len(inputs) != len(first[0]):
            kinds.append(f"rank {rank} has {len(inputs)} inputs, rank 0 has {len(first[0])}")
    if not result.add("inputs_build", kinds):
        return None
    floating = [i for i, x in enumerate(first[0]) if x.is_floating_point()]

    result.add("inputs_deterministic", [
        f"rank {rank}: input {i} differs between two calls with the same seed"
        for rank in range(world) for i, (x, y) in enumerate(zip(first[rank], again[rank])) if not torch.equal(x, y)])
    nonconstant = []
    for rank in range(world):
        for i in floating:
            x = first[rank][i]
            if not bool(x.isfinite().all()):
                nonconstant.append(f"rank {rank}: input {i} has NaN or inf")
            elif x.numel() > 1 and bool((x == x.flatten()[0]).all()):
                nonconstant.append(f"rank {rank}: input {i} is constant ({float(x.flatten()[0]):g})")
    if not floating:
        nonconstant.append("no floating-point input: nothing random to compute on")
    result.add("inputs_random", nonconstant)
    result.add("inputs_seed_dependent", [
        f"rank {rank}: input {i} is the same for seeds {seeds[0]} and {seeds[1]}"
        for rank in range(world) for i in floating if torch.equal(per_seed[0][rank][i], per_seed[1][rank][i])])
    differs = any(not torch.equal(x, y) for rank in range(1, world) for x, y in zip(first[0], first[rank]))
    result.add("inputs_differ_across_ranks", [] if differs else ["every rank gets identical inputs: use rank_generator for per-rank data"])
    return floating


# ---------------------------------------------------------------------- reference


def _check_reference(problem: Problem, world: int, size: str, seeds: tuple[int, int], floating: list[int], timeout_s: float,
                     result: LintResult) -> None:
    import torch

    from sandbox.harness.compare import compare_outputs
    from sandbox.harness.verdict import Verdict
    from sandbox.harness.reference_outputs import run_reference
    from sandbox.harness.groups import StageTimeout

    # trials: seed A, seed B, seed A again, seed A with each floating input perturbed, then seed A in each other regime
    other_regimes = tuple(range(1, problem.spec.regimes))
    trial_seeds = (seeds[0], seeds[1], seeds[0], *(seeds[0] for _ in floating), *(seeds[0] for _ in other_regimes))
    perturb = (None, None, None, *floating)
    regimes = (0,) * len(perturb) + other_regimes
    try:
        outputs = run_reference(problem, world, seeds=trial_seeds, size=size, include_native=True, timeout_s=timeout_s,
                                perturb=perturb, regimes=regimes)
    except Verdict as verdict:
        logs = "".join(f"\n{excerpt.text()[-1500:]}" for excerpt in verdict.fields.get("logs", []))
        result.add("reference_runs", [verdict.message + logs])
        return
    except StageTimeout as timeout:
        result.add("reference_runs", [f"{timeout} (a deadlock between ranks?)"])
        return
    result.add("reference_runs", [])
    spec = problem.spec
    base = [outputs[rank][0] for rank in range(world)]
    # seed A's trial in each regime (the first: base): its outputs must be fit to judge by, as regime 0's are
    per_regime = {0: base, **{regime: [outputs[rank][len(perturb) + i] for rank in range(world)]
                              for i, regime in enumerate(other_regimes)}}

    finite, constant = [], []
    for regime, trial in per_regime.items():
        for rank, out in enumerate(trial):
            for index, (native, expected) in enumerate(zip(out.native, out.expected)):
                native, expected = _widened(torch, native), _widened(torch, expected)
                where = f"rank {rank} output {index}" + (f" in regime {regime}" if regime else "")
                if native.is_floating_point() and not (bool(native.isfinite().all()) and bool(expected.isfinite().all())):
                    finite.append(f"{where} has NaN or inf")
                if native.numel() == 0:
                    constant.append(f"{where} is empty")
                elif bool((native == 0).all()):
                    constant.append(f"{where} is all zero")
                elif native.numel() > 1 and bool((native == native.flatten()[0]).all()):
                    constant.append(f"{where} is constant ({float(native.flatten()[0]):g})")
    result.add("outputs_finite", finite)
    result.add("outputs_nonconstant", constant)
    if spec.sum_of_products:
        result.add("sum_of_products_holds", _sums_of_products(torch, per_regime))

    result.add("outputs_seed_dependent", [
        f"rank {rank} output {index} is the same for seeds {seeds[0]} and {seeds[1]}"
        for rank in range(world)
        for index, (a, b) in enumerate(zip(outputs[rank][0].native, outputs[rank][1].native)) if _same(torch, a, b)])

    unused = []
    for trial, input_index in enumerate(floating, start=3):
        if all(_same(torch, a, b) for rank in range(world) for a, b in zip(outputs[rank][0].native, outputs[rank][trial].native)):
            unused.append(f"input {input_index}: replacing it by a noisy copy on every rank changes no output on any rank")
    result.add("outputs_depend_on_inputs", unused)

    rerun = []
    for rank in range(world):
        mismatch = compare_outputs(base[rank], outputs[rank][2].native, spec.atol, spec.rtol, rank, 0, world)
        if mismatch is not None:
            rerun.append(f"rank {rank}: a second run of the reference with the same seed fails: {mismatch.detail}")
    result.add("rerun_passes", rerun)

    missed_element, missed_scale = [], []
    for regime, trial in per_regime.items():  # each regime's native error sets its tolerance: none may let these through
        in_regime = f" in regime {regime}" if regime else ""
        for rank, out in enumerate(trial):
            for index, native in enumerate(out.native):
                if native.numel() == 0:
                    continue
                rounding = _honest_rounding(out, index, spec, world)
                moved = _moved_element(torch, native, rounding)
                if compare_outputs(out, _replace(out.native, index, moved), spec.atol, spec.rtol, rank, 0, world) is None:
                    missed_element.append(f"rank {rank} output {index}{in_regime}: one element moved by {ELEMENT_ERROR:.0%} of the "
                                          f"max-abs passes (atol {spec.atol:g}, rtol {spec.rtol:g}, native error "
                                          f"{out.native_max_abs_err[index]:.3g})")
                if native.is_floating_point():
                    # a dtype too coarse to hold a 2% error (float8) gets the smallest one it can hold
                    factor = max(SCALE_ERROR, 1 + torch.finfo(native.dtype).eps)
                    scaled = (native.to(torch.float64) * factor).to(native.dtype)
                    if compare_outputs(out, _replace(out.native, index, scaled), spec.atol, spec.rtol, rank, 0, world) is None:
                        missed_scale.append(f"rank {rank} output {index}{in_regime}: the output scaled by {factor:g} passes (atol "
                                            f"{spec.atol:g}, rtol {spec.rtol:g}, native RMS error {out.native_rms_err[index]:.3g})")
    result.add("detects_element_error", missed_element)
    result.add("detects_scale_error", missed_scale)


def _sums_of_products(torch, per_regime: dict) -> list[str]:
    """Where a problem declares ``sum_of_products``: outputs no larger than the reference on the
    inputs' magnitudes (true of every sum of products with nonnegative weights, which the judge's
    rounding bound assumes; a subtraction or a division by data breaks it)."""
    broken = []
    for regime, trial in per_regime.items():
        for rank, out in enumerate(trial):
            if len(out.magnitudes) != out.outputs:
                broken.append(f"rank {rank}: the reference gave no magnitudes for its outputs")
                continue
            for index, (expected, terms) in enumerate(zip(out.expected, out.magnitudes)):
                if not expected.is_floating_point():
                    broken.append(f"rank {rank} output {index} is not floating-point")
                    continue
                over = expected.to(torch.float64).abs() - terms.to(torch.float64) * (1 + 1e-6)
                if bool((over > 1e-30).any()):
                    where = f" in regime {regime}" if regime else ""
                    broken.append(f"rank {rank} output {index}{where}: an element is larger ({float(over.max()):.3g} more) than "
                                  "the reference on the inputs' magnitudes, so its outputs are not sums of products with "
                                  "nonnegative weights (sum_of_products)")
    return broken


def _widened(torch, tensor):
    """float8 tensors as fp32 (torch implements few operations on float8); others unchanged."""
    if tensor.is_floating_point() and tensor.element_size() == 1:
        return tensor.to(torch.float32)
    return tensor


def _same(torch, a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(_widened(torch, a), _widened(torch, b)))


def _replace(outputs: list, index: int, tensor) -> list:
    return [tensor if i == index else t for i, t in enumerate(outputs)]


def _honest_rounding(out, index: int, spec, world: int):
    """Per element, how far honest rounding may move output ``index`` (sandbox/harness/compare.py),
    where the problem is a sum of products; else None."""
    from sandbox.harness.compare import honest_rounding

    if index >= len(out.magnitudes) or not out.native[index].is_floating_point():
        return None
    return honest_rounding(out.magnitudes[index].flatten(), out.dtypes[index], spec.rtol, world, spec.atol)


def _moved_element(torch, tensor, rounding=None):
    """A copy with the largest-magnitude element (the one the relative tolerance helps most) moved
    by ``ELEMENT_ERROR`` of the max-abs (by at least 1 for integer outputs), beyond what honest
    rounding may move it where that is known (``rounding``, per element)."""
    flat = tensor.flatten().clone()
    work = flat.to(torch.float64)
    where = int(work.abs().argmax())
    peak = float(work.abs().max())
    step = ELEMENT_ERROR * peak if tensor.is_floating_point() else max(1, round(ELEMENT_ERROR * peak))
    if rounding is not None:
        step += float(rounding[where])
    value = float(work[where])
    outward = value + (step if value >= 0 else -step)
    # away from zero, unless the dtype saturates there (float8 casts clamp to the largest finite value)
    for moved in (outward, value - (outward - value)):
        flat[where] = torch.tensor(moved, dtype=torch.float64).to(tensor.dtype)
        if float(flat[where].to(torch.float64)) != value:
            break
    return flat.reshape(tensor.shape)
