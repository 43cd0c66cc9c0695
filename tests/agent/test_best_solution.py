"""The loop's best solution (issue 13): the highest speedup, and the correct steps whose timing
interval overlaps it named as not told apart from it, in the feedback and the run's summary."""

import json

from agent.budget import Budget, Spend
from agent.loop import BestSolution
from agent.prompting import feedback_prompt
from sandbox.report import EvalReport
from tests.agent.test_agent_runs import canned, run

SOLUTION = "```python\nimport torch.distributed as dist\n\n\ndef solution(tensor):  # variant {n}\n    dist.all_reduce(tensor)\n    return tensor\n```"


class TimedJudge:
    """``evaluate`` without a sandbox: each step's verdict, speedup and interval in turn."""

    def __init__(self, verdicts):
        self.verdicts = list(verdicts)

    def __call__(self, source: str, step: int) -> EvalReport:
        status, speedup, interval = self.verdicts[step - 1]
        return EvalReport(status=status, message=f"{status} at step {step}", problem="all_reduce", world=2, device="cpu",
                          dtype="bfloat16", size="small", speedup=speedup, speedup_ci=interval)


def test_steps_whose_intervals_overlap_the_best_are_named_as_tied(tmp_path):
    judge = TimedJudge([("correct", 1.50, [1.30, 1.70]), ("correct", 1.60, [1.45, 1.75]), ("correct", 1.20, [1.10, 1.25]),
                        ("wrong", None, None)])
    result, episode, data = run(tmp_path, canned(*(SOLUTION.format(n=n) for n in range(4))), judge=judge, steps=4)
    best = data["info"]["best"]
    assert best["step"] == 2 and best["speedup"] == 1.60 and best["speedup_ci"] == [1.45, 1.75]
    assert best["tied_steps"] == [1]  # step 3's interval lies wholly below: ranked, not tied
    assert "best: step 2 (1.60x, not told apart from step 1)" in data["messages"][-1]["content"]
    feedback = [m["content"] for m in data["messages"] if m["role"] == "user"][3]  # after step 3
    assert "Best so far: step 2, 1.60x (95% interval 1.45-1.75)." in feedback
    assert "Step 1 is within that interval: the timing cannot tell it apart from step 2." in feedback


def test_a_best_with_no_overlapping_step_says_nothing_of_ties():
    report = EvalReport(status="correct", message="correct", problem="all_reduce", world=2, device="cpu", dtype="bfloat16",
                        size="small", speedup=1.0, speedup_ci=[0.9, 1.1])
    best = BestSolution(step=1, speedup=2.0, speedup_ci=[1.9, 2.1], status="correct", source="")
    text = feedback_prompt(report, step=2, budget=Budget(steps=5), spend=Spend(steps=2), best=best)
    assert "Best so far: step 1, 2.00x (95% interval 1.90-2.10)." in text and "apart" not in text
    assert best.speed() == "2.00x"
    tied = best.model_copy(update={"tied_steps": [2, 4]})
    assert tied.speed() == "2.00x, not told apart from steps 2, 4"
    assert "Steps 2, 4 are within that interval" in feedback_prompt(report, step=5, budget=Budget(steps=5), spend=Spend(steps=5),
                                                                   best=tied)
    assert json.loads(tied.model_dump_json(exclude={"source"}))["tied_steps"] == [2, 4]
