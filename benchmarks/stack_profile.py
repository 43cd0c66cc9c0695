"""Where a sampled profile's time went: py-spy's raw output (``py-spy record --format raw``, one
collapsed stack a line, ``frame;frame;... count``) summed per frame, over the stacks that pass
through a frame matching ``--within`` (all stacks without it).

    py-spy record --native --format raw -o prof.txt -- python3 benchmarks/first_call.py --steps
    python benchmarks/stack_profile.py prof.txt --within empty_strided_p2p --top 30
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

from table import print_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path)
    parser.add_argument("--within", help="a regular expression: only the stacks with a frame matching it")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    within = re.compile(args.within) if args.within else None
    inclusive, leaves, total = Counter(), Counter(), 0
    for line in args.profile.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if within and not any(within.search(frame) for frame in frames):
            continue
        total += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
        leaves[frames[-1]] += int(count)
    if not total:
        print(f"no stacks{f' through {args.within}' if args.within else ''} in {args.profile}")
        return 1
    for title, counts in (("inclusive", inclusive), ("leaf (self)", leaves)):
        print_table(f"{title} samples over {total} stacks{f' through {args.within}' if args.within else ''}",
                    ["share", "samples", "frame"],
                    [[f"{n / total:.1%}", n, frame[:160]] for frame, n in counts.most_common(args.top)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
