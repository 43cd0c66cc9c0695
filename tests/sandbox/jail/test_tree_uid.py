"""A tree's count of processes is its own: a candidate that takes every thread its RLIMIT_NPROC
allows leaves other trees theirs (sandbox/jail/spec.py own_uid). The kernel counts RLIMIT_NPROC
by uid, and under root every tree ran as 65534: one tree's 8191 threads left every other unable
to start a thread or fork, a pre-started group, another evaluation's ranks or a compiler alike."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

from sandbox.jail import Jail, JailSpec, own_uid

HOG = textwrap.dedent("""
    import threading, time
    hold, made = threading.Event(), 0
    try:
        while True:
            threading.Thread(target=hold.wait, daemon=True).start()
            made += 1
    except RuntimeError:
        pass
    open("made", "w").write(str(made))
    time.sleep(120)
""")
VICTIM = textwrap.dedent("""
    import os, threading
    try:
        threading.Thread(target=lambda: None).start()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        print("started a thread and a process")
    except (RuntimeError, OSError) as error:
        print(f"refused: {error}")
""")


def _folder(tmp_path: Path, name: str, script: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "main.py").write_text(script)
    return folder


def _victim_beside_a_hog(tmp_path: Path, hog_uid: int | None, victim_uid: int | None) -> tuple[int, str]:
    """How many threads the hog started, and what the victim, started while they all run, said."""
    hog_dir = _folder(tmp_path, "hog", HOG)
    victim_dir = _folder(tmp_path, "victim", VICTIM)
    hog = Jail.start(JailSpec(workdir=str(hog_dir), uid=hog_uid), [sys.executable, "main.py"])
    try:
        deadline = time.monotonic() + 120
        while not (hog_dir / "made").exists():
            assert time.monotonic() < deadline and hog.poll() is None, "the hog never reported"
            time.sleep(0.1)
        made = int((hog_dir / "made").read_text())
        said_r, said_w = os.pipe()
        try:
            with Jail.start(JailSpec(workdir=str(victim_dir), uid=victim_uid), [sys.executable, "main.py"], stdout=said_w) as victim:
                os.close(said_w)
                said_w = -1
                victim.wait(60)
            said = os.read(said_r, 4096).decode()
        finally:
            os.close(said_r)
            if said_w >= 0:
                os.close(said_w)
    finally:
        hog.kill()
    return made, said


def test_a_tree_that_takes_every_thread_leaves_another_tree_its_own(tmp_path):
    made, said = _victim_beside_a_hog(tmp_path, own_uid(), own_uid())
    assert made > 8000, made  # the hog took about all its limit (8192 less its own threads)
    assert "started a thread and a process" in said, said


def test_trees_that_share_a_uid_under_root_share_its_count(tmp_path):
    """Why each tree gets a uid of its own: two trees of uid 65534 (the default, which kloop's
    candidates had) share one count, and the hog's threads leave the other none. Under root only:
    elsewhere every tree has a user namespace of its own."""
    if os.geteuid() != 0:
        return  # nothing shared to show: the test above is the whole guarantee here
    made, said = _victim_beside_a_hog(tmp_path, None, None)
    assert made > 8000, made
    assert "refused" in said, said


def test_a_tree_s_own_uid_is_drawn_apart_from_any_user_s():
    drawn = {own_uid() for _ in range(64)}
    if os.geteuid() != 0:
        assert drawn == {None}
        return
    assert len(drawn) > 60 and all(2_000_000_000 <= uid < 2_000_000_000 + 2**24 for uid in drawn)
    episode = own_uid("/runs/episode-1")  # an agent's shell: every command of an episode as one uid, its files its own
    assert episode == own_uid("/runs/episode-1") != own_uid("/runs/episode-2")
    assert 2_000_000_000 <= episode < 2_000_000_000 + 2**24
