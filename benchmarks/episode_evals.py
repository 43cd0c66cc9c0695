"""An episode's evaluations, as ``kloop run`` and batch episodes make them (agent/session.py): the
same candidate judged at every step of one sandbox session, through one long-lived harness
(warm: groups started ahead while the model writes the next step) against a harness process per
step (fresh), sessions of the two kinds in alternation, side by side. ``--think-s``: the model's
time between two steps, not counted.

    python benchmarks/episode_evals.py --device cuda --world 1                      # the H100/H200 run
    python benchmarks/episode_evals.py --device cpu --world 2 --candidate tests/fixtures/candidates/all_reduce_fp32.py --allow-nccl
    ... --sandbox docker [--image kernel-loop-sandbox:cpu-test]        # the same in a Docker sandbox's container
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from cli_latency import add_candidate_arguments
from table import print_table

KINDS = {"warm": True, "fresh": False}


def session_walls(args: argparse.Namespace, warm: bool) -> list[tuple[float, str, float]]:
    """One session of ``args.steps`` evaluations: (wall seconds, status, startup stage seconds) per step."""
    from agent.run_config import SandboxSettings
    from agent.session import EvaluationSession
    from sandbox.harness.config import HarnessConfig

    harness = HarnessConfig(problem=args.problem, world=args.world, device=args.device, allow_nccl=args.allow_nccl,
                            timed=not args.untimed)
    source = args.candidate.read_text()
    steps = []
    with EvaluationSession(harness, SandboxSettings(backend=args.sandbox, image=args.image), warm=warm) as session:
        for step in range(args.steps):
            if step:
                time.sleep(args.think_s)
            started = time.monotonic()
            report = session.evaluate(source, step)
            steps.append((time.monotonic() - started, report.status, report.stage_wall_s.get("startup", 0.0)))
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_candidate_arguments(parser)
    parser.add_argument("--untimed", action="store_true", help="correctness only (no timing, no profile)")
    parser.add_argument("--steps", type=int, default=4, help="evaluations a session")
    parser.add_argument("--sessions", type=int, default=2, help="sessions of each kind, in alternation")
    parser.add_argument("--think-s", type=float, default=5.0, help="the model's time between two steps (not counted)")
    parser.add_argument("--sandbox", choices=["local", "docker"], default="local", help="where the episode's evaluations run")
    parser.add_argument("--image", help="the sandbox image for --sandbox docker (default: kernel-loop-sandbox:latest)")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.sessions < 1:
        parser.error("--steps must be at least 2 and --sessions at least 1")
    if not args.candidate.is_file():
        parser.error(f"no such candidate: {args.candidate}")
    rows, later = [], {kind: [] for kind in KINDS}
    for session in range(1, args.sessions + 1):
        for kind, warm in (KINDS.items() if session % 2 else reversed(KINDS.items())):
            steps = session_walls(args, warm)
            later[kind] += [wall for wall, _, _ in steps[1:]]
            for step, (wall, status, startup) in enumerate(steps, start=1):
                rows.append([kind, session, step, round(wall, 2), round(startup, 2), status])
            print(f"{kind} session {session}: " + ", ".join(f"{wall:.2f} s" for wall, _, _ in steps), flush=True)
    print_table(f"an episode's evaluations: {args.problem}, {args.candidate.name}, {args.device}, world {args.world}, {args.sandbox} sandbox, "
                f"{args.steps} steps a session, {args.think_s:g} s between steps", ["harness", "session", "step", "wall_s",
                                                                                  "startup_s", "status"], rows)
    medians = {kind: statistics.median(values) for kind, values in later.items()}
    print_table("steps after the first, per harness", ["harness", "steps", "median_s", "min_s", "max_s"],
                [[kind, len(values), round(medians[kind], 2), round(min(values), 2), round(max(values), 2)]
                 for kind, values in later.items()])
    print(f"fresh / warm, median step after the first: {medians['fresh'] / medians['warm']:.2f}x")
    return 0 if all(row[-1] == "correct" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
