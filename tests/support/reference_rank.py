"""A real reference rank (rank 0 of 1) of the all_reduce problem, run in a process of its own:
``run(body, mode, folder)`` runs ``body`` (Python, with ``server`` a loaded ReferenceServer and
``torch``, ``json``, ``os`` imported) and returns the JSON its last printed line holds."""

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PREAMBLE = """
import json, os, sys
import torch
from problems import get_problem
from sandbox.harness.reference_rank import ReferenceServer

problem = get_problem("all_reduce")
config = {"rank": 0, "world": 1, "mode": sys.argv[2], "dtype": problem.spec.dtype, "shape": problem.shape("small"),
          "store": os.path.join(sys.argv[1], "store"), "collectives": True, "problem_ref": problem.ref}
server = ReferenceServer(None, config)
server.load({"type": "load"}, [])
"""


def run(body: str, mode: str, folder, timeout_s: float = 300.0) -> dict:
    # out at once once the body has printed: at interpreter exit gloo's threads raced the process group's teardown and
    # aborted the process ("terminate called without an active exception") in a CI run on a loaded two-core host
    script = PREAMBLE + textwrap.dedent(body) + "\nsys.stdout.flush()\nos._exit(0)\n"
    done = subprocess.run([sys.executable, "-c", script, str(folder), mode], capture_output=True, text=True, timeout=timeout_s,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
