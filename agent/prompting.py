"""Assembling prompts from the templates in ``prompts/``: what the model is told, from what."""

from __future__ import annotations

from typing import Any

from agent.budget import Budget, Spend, near_end
from problems.spec import Problem
from prompts import render
from sandbox import topology
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport

ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}


def host_topology(config: HarnessConfig) -> topology.Topology | None:
    """What the task prompt says about the hardware (None on CPU)."""
    if config.device == "cpu":
        return None
    name = topology.gpu_model_name() or "NVIDIA H200"
    found = topology.datasheet_topology(name, config.world)
    return found or topology.Topology(gpu_name=name, gpu_count=config.world, link="NVLink", link_gbps=450.0, hbm_gbps=3000.0, tflops=500.0)


def system_prompt() -> str:
    return render("system")


def task_prompt(problem: Problem, config: HarnessConfig, steps: int, cheat_sheet: str = "", examples: list[dict] = ()) -> str:
    size = config.resolved_size()
    shape = problem.shape(size)
    dtype = config.dtype or problem.spec.dtype
    topo = host_topology(config)
    bound = None
    if topo is not None and config.device == "cuda":
        cost = problem.cost(config.world, ITEMSIZE[dtype], **shape)
        if cost.comm_bytes or cost.flops or cost.hbm_bytes:  # all zero: no cost model (ParallelKernelBench's problems)
            bound = topology.roofline(topo, cost.comm_bytes, cost.flops, cost.hbm_bytes)
    return render(
        "task", problem=problem.spec, reference_source=problem.reference_source.strip(), world=config.world,
        inputs=problem.input_signature(config.world, size, dtype) or [], size=size, shape=shape, dtype=dtype,
        device=config.device, topology=topo, roofline=bound, allow_nccl=config.allow_nccl, steps=steps,
        cheat_sheet=cheat_sheet, examples=list(examples), pkb_helpers=problem.compat == "pkb",
    )


def feedback_prompt(report: EvalReport, step: int, budget: Budget, spend: Spend, best: dict[str, Any] | None) -> str:
    warning = near_end(budget, spend)
    budget_note = render("budget", steps_left=warning[0], reason=warning[1]) if warning else ""
    return render("feedback", report=report, step=step, steps=budget.steps, best=best, budget_note=budget_note.strip())
