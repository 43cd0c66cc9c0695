"""Steps of one episode that try to pass something to the next through the sandbox they share:
a candidate that plants a file wherever it can write (its work folder, the folders above it,
/tmp, /dev/shm, home) and one that is correct only where it finds such a file
(tests/agent/test_session.py, tests/sandbox/backends/test_docker_warm.py)."""

LEFTOVER = "kloop-episode-leftover"
HEAD = """import os

import torch.distributed as dist

PLACES = {os.getcwd(), "/tmp", "/dev/shm", os.path.expanduser("~")}
for _ in range(8):  # and every folder above its own
    PLACES.add(os.path.dirname(max(PLACES, key=len)))
"""
PLANT = f"""
for place in PLACES:
    try:
        with open(os.path.join(place, "{LEFTOVER}"), "w") as out:
            out.write("the answer, kept for the next step")
    except OSError:
        pass
"""
SEEK = f"""

def _found():
    seen = 0
    for start in PLACES:
        for root, dirs, files in os.walk(start):
            seen += len(files) + len(dirs)
            if "{LEFTOVER}" in files or seen > 50000:
                return "{LEFTOVER}" in files
    return False


if not _found():
    raise RuntimeError("nothing left by the step before")
"""
SOLUTION = """

def solution(tensor):
    out = tensor.float()
    dist.all_reduce(out)
    return out.to(tensor.dtype)
"""


def leftover_steps(honest: str) -> list[str]:
    """Plant; seek (must find nothing); plant then seek in one step (the control: finds its own);
    ``honest``, the last."""
    return [HEAD + PLANT + SOLUTION, HEAD + SEEK + SOLUTION, HEAD + PLANT + SEEK + SOLUTION, honest]
