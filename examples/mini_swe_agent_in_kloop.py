"""mini-swe-agent's own agent, working in kloop's sandbox.

    pip install -e '.[mini]'
    python examples/mini_swe_agent_in_kloop.py                        # offline: a deterministic model
    python examples/mini_swe_agent_in_kloop.py --model anthropic/claude-sonnet-4-5 --device cuda --world 8

The environment (agent.bash.mini.KloopEnvironment) is the agent's shell of `kloop run --mode
bash`: each command runs in the judge's jail (no keys, no network, every process ended when it
returns, a timeout) with kloop's `check`, `bench`, `profile` and `submit` on the PATH. The
agent is mini-swe-agent's DefaultAgent with a config of your own (here a short one); offline, a
DeterministicToolcallModel plays the commands of kloop's `scripted:bash-demo`; with --model, any
model mini-swe-agent's litellm models take (its key in the environment of this process only;
the shell never sees it). The submission is then judged by the full harness on hidden seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402

from agent.bash.mini import KloopEnvironment  # noqa: E402

AGENT_CONFIG = {
    "system_template": "You are an expert GPU kernel engineer working at a bash shell. Run one command per bash tool call.",
    "instance_template": "{{task}}",
    "step_limit": 20,
    "cost_limit": 5.0,
}
DEMO_SCRIPT = Path(__file__).resolve().parents[1] / "agent" / "scripts" / "bash-demo.yaml"


def offline_model():
    """mini-swe-agent's DeterministicToolcallModel, playing the commands of scripted:bash-demo."""
    from minisweagent.models.test_models import DeterministicToolcallModel, make_toolcall_output

    outputs = []
    for index, item in enumerate(yaml.safe_load(DEMO_SCRIPT.read_text())):
        command = item["tool_calls"][0]["arguments"]["command"]
        call = {"id": f"call_{index}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
        output = make_toolcall_output(item["text"], [call], [{"command": command, "tool_call_id": f"call_{index}"}])
        output["extra"]["cost"] = 0.0  # offline: free
        outputs.append(output)
    return DeterministicToolcallModel(outputs=outputs, cost_per_call=0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a litellm model name (default: offline, deterministic)")
    parser.add_argument("--problem", default="all_reduce")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "emulate"])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/mini"))
    args = parser.parse_args()
    if args.model:
        from minisweagent.models import get_model

        model = get_model(args.model)
    else:
        model = offline_model()
    env = KloopEnvironment(problem=args.problem, device=args.device, world=args.world, allow_nccl=args.device == "cpu",
                           steps=AGENT_CONFIG["step_limit"])
    args.out.mkdir(parents=True, exist_ok=True)
    trajectory = args.out / f"{args.problem}.traj.json"
    try:
        agent = DefaultAgent(model, env, **AGENT_CONFIG, output_path=trajectory)
        result = agent.run(env.task)
    finally:
        env.close()
    verdict = env.judge()
    print(f"exit status: {result.get('exit_status')}")
    print(f"verdict: {verdict.status if verdict else 'nothing submitted'}" + (f" ({verdict.message})" if verdict else ""))
    print(f"trajectory: {trajectory}")
    return 0 if verdict is not None and verdict.correct else 1


if __name__ == "__main__":
    sys.exit(main())
