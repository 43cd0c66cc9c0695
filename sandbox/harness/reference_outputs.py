"""A problem's reference on its own: its outputs for given keys, with no candidate (problem lint, tests)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from problems.contract import Problem
from sandbox.harness import messages as m
from sandbox.harness.calls import Expected, Inputs
from sandbox.harness.groups import RankFailure, RankGroup, close_answers
from sandbox.harness.verdict import Verdict
from sandbox.harness.launch import reference_launcher
from sandbox.harness.reference_rank import MAX_CALLS_PER_MAKE
from sandbox.harness.pipeline import reference_failure_message
from sandbox.rank import input_mask
from sandbox.report import LogExcerpt


def run_reference(problem: Problem, world: int, device: str = "cpu", seeds: tuple[int, ...] = (0,), size: str | None = None,
                  dtype: str | None = None, include_native: bool = True, timeout_s: float = 300.0,
                  perturb: tuple[int | None, ...] = (), regimes: tuple[int, ...] = ()) -> list[list[Expected]]:
    """The reference on ``world`` ranks for each seed (the generator's seed, used as the call's
    key); returns ``[rank][seed]``. ``perturb[i]``, where given and not None, is the index of a
    floating input that call i replaces by a noisy copy (the same on every rank); ``regimes[i]``,
    where given, the input regime call i draws from (0 otherwise). Raises Verdict
    ("crashed") when the reference fails, StageTimeout when it hangs."""
    size = size or ("default" if device == "cuda" else "small")
    perturb = tuple(perturb) + (None,) * (len(seeds) - len(perturb))
    regimes = tuple(regimes) + (0,) * (len(seeds) - len(regimes))
    with tempfile.TemporaryDirectory(prefix="kloop-reference-") as tmp:
        folder = Path(tmp)
        (folder / "tmp").mkdir()
        config = {"mode": device, "dtype": dtype or problem.spec.dtype, "shape": problem.shape(size), "store": str(folder / "store"),
                  "collectives": True, "on_cpu": device == "emulate", "problem_ref": problem.ref}
        group = RankGroup("reference", world, config, reference_launcher(folder, device), None)
        try:
            for expect, stage in ((m.Ready, "reference start-up"), (m.Loaded, "reference load")):
                if expect is m.Loaded:
                    answers = group.ask({"type": "load"}, expect, timeout_s, stage)
                else:
                    answers = group.collect(expect, timeout_s, stage)
                _raise_failure(group, answers)
            calls = [{"key": seed, "regime": regime, "rng": seed, "expect": True, "native": include_native, "perturb": p,
                      "mask": input_mask.new_key()}
                     for seed, p, regime in zip(seeds, perturb, regimes)]
            outputs: list[list[Expected]] = [[] for _ in range(world)]
            for start in range(0, len(calls), MAX_CALLS_PER_MAKE):
                answers = group.ask({"type": "make", "calls": calls[start:start + MAX_CALLS_PER_MAKE]}, m.Made, timeout_s,
                                    "reference run")
                _raise_failure(group, answers)
                try:
                    for answer in answers:
                        for summary in answer.reply.calls:
                            Inputs.taken(summary, answer.fds).close()  # only the expectations are wanted here
                            outputs[answer.rank].append(Expected.read(summary, answer.fds, _compare_device(device)))
                finally:
                    close_answers(answers)
            return outputs
        finally:
            group.close()


def _compare_device(device: str):
    """Where the expectations are read: a cuda reference's rank 0 hands them over as device memory."""
    if device != "cuda":
        return None
    import torch

    return torch.device("cuda", 0)


def _raise_failure(group: RankGroup, answers: list) -> None:
    for answer in answers:
        if isinstance(answer, RankFailure):
            close_answers(answers)
            text = answer.text or group.rank_log(answer.rank)
            raise Verdict("crashed", reference_failure_message(answer, text), logs=[LogExcerpt.of(f"reference rank {answer.rank}", text)])
