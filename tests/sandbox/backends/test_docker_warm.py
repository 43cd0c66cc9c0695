"""A long-lived harness inside a Docker sandbox (``DockerSandbox.spawn``, ``SpawnedExec``): a
spawned command's pipes and its end; an episode's evaluations through one warm harness in the
container, as in the local sandbox; a step that plants something for the next finds nothing of
it there either; nothing left in the container once it is closed."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.evaluate import SequentialEvaluator, can_warm
from sandbox.readiness import wait_readable
from tests.fixtures.candidates import source
from tests.support.leftovers import leftover_steps
from tests.support.docker import box, docker_client, make_box, no_container_left, processes, test_image  # noqa: F401

pytestmark = pytest.mark.docker

UPPER = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line.upper()); sys.stdout.flush()\nsys.stderr.write('bye')\n"

CORRECT, WRONG = source("all_reduce_fp32"), source("all_reduce_wrong_rank")  # the local tests' candidates


def _config(**overrides):
    from sandbox.harness.config import HarnessConfig

    base = dict(problem="all_reduce", world=2, device="cpu", allow_nccl=True, timed=False, trials=2)
    return HarnessConfig(**{**base, **overrides})


def _read_line(stream, timeout_s: float = 30.0) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout_s
    while not data.endswith(b"\n"):
        assert wait_readable([stream], max(deadline - time.monotonic(), 0.01)), data
        chunk = os.read(stream.fileno(), 4096)
        assert chunk, f"EOF after {data!r}"
        data += chunk
    return data


def test_a_spawned_command_talks_through_its_pipes_and_ends_with_its_stdin(box):
    spawned = box.spawn(["python3", "-c", UPPER])
    try:
        for line in (b"first\n", b"second line\n"):
            spawned.stdin.write(line)
            spawned.stdin.flush()
            assert _read_line(spawned.stdout) == line.upper()
        assert spawned.poll() is None
        spawned.stdin.close()  # EOF: the loop ends, the command exits 0
        assert spawned.wait(30) == 0 and spawned.poll() == 0
        assert os.read(spawned.stdout.fileno(), 10) == b""  # its stdout ended with it
        assert "bye" in spawned.stderr_text()
    finally:
        spawned.kill_tree()


def test_ending_a_spawned_command_ends_what_it_started(box):
    spawned = box.spawn(["python3", "-c", "import subprocess, time\nsubprocess.Popen(['sleep', '1000'])\ntime.sleep(1000)"])
    deadline = time.monotonic() + 30
    while not any("sleep 1000" in line for line in _listed(box)) and time.monotonic() < deadline:
        time.sleep(0.2)
    with pytest.raises(subprocess.TimeoutExpired):
        spawned.wait(0.5)
    spawned.kill_tree()
    assert spawned.wait(30) != 0
    assert processes(box) == []


def _listed(box) -> list[str]:
    """What runs in the container, read without ``exec`` (which would end it): /proc through a spawned reader."""
    reader = box.spawn(["python3", "-S", "-c", "import os\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
                        "        try: print(open('/proc/%s/cmdline' % p, 'rb').read().replace(b'\\0', b' ').decode())\n"
                        "        except OSError: pass\n"])
    reader.wait(30)
    lines = []
    while chunk := os.read(reader.stdout.fileno(), 65536):
        lines.append(chunk)
    reader.stdout.close()
    return b"".join(lines).decode().splitlines()


def test_an_episodes_evaluations_go_through_one_warm_harness_in_the_container(box):
    assert can_warm(box)
    evaluator = SequentialEvaluator(box, warm=True)
    try:
        assert evaluator.warm is not None
        reports = [evaluator.evaluate(source, _config()) for source in (CORRECT, WRONG, CORRECT)]
        harness = evaluator.warm.process
        assert [r.status for r in reports] == ["correct", "wrong", "correct"], [r.message for r in reports]
        assert all("container" in r.isolation for r in reports)
        assert harness is evaluator.warm.process and harness.poll() is None  # one harness answered all three
        print(f"docker warm steps: startup {[r.stage_wall_s.get('startup') for r in reports]} s, "
              f"wall {[r.wall_s for r in reports]} s")
        # later steps find the harness up and the reference's group kept: a shorter start-up than the first one's
        assert max(reports[1].stage_wall_s["startup"], reports[2].stage_wall_s["startup"]) < reports[0].stage_wall_s["startup"]
    finally:
        evaluator.close()
    assert evaluator.warm.process is None
    assert processes(box) == []  # the harness and every group it kept ended with it


@pytest.mark.parametrize("warm", [True, False])
def test_a_step_finds_nothing_an_earlier_step_left_in_the_container(box, warm):
    """Hostile: in one container (through one warm harness, or a harness a step), a step plants a
    file wherever it can write and the next is correct only where it finds one: it must find none.
    Before the sweep it found the first step's file in the container's /dev/shm (shared by every
    tree: the jail gets no mount namespace there), either way. The control: a step that plants
    and then seeks finds its own; an honest step after all is correct."""
    evaluator = SequentialEvaluator(box, warm=warm)
    try:
        reports = [evaluator.evaluate(text, _config()) for text in leftover_steps(CORRECT)]
    finally:
        evaluator.close()
    assert reports[0].status == "correct", reports[0].message  # planting is not a fault in itself
    assert reports[1].status != "correct" and "nothing left by the step before" in reports[1].message, reports[1].message
    assert reports[2].status == "correct", reports[2].message
    assert reports[3].status == "correct", reports[3].message
    assert processes(box) == []


def test_episode_evals_benchmark_in_a_docker_sandbox(test_image):
    """benchmarks/episode_evals.py --sandbox docker: warm and fresh sessions side by side in containers."""
    repo = Path(__file__).resolve().parents[3]
    result = subprocess.run([sys.executable, str(repo / "benchmarks" / "episode_evals.py"), "--device", "cpu", "--world", "2",
                             "--allow-nccl", "--untimed", "--steps", "2", "--sessions", "1", "--think-s", "1", "--sandbox", "docker",
                             "--image", test_image, "--candidate", str(repo / "tests/fixtures/candidates/all_reduce_fp32.py")],
                            cwd=repo, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(repo)}, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "docker sandbox" in result.stdout
    assert re.search(r"fresh / warm, median step after the first: \d+\.\d\dx", result.stdout)
