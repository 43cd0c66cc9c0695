"""The web page in real headless Chromium: log in, watch a scripted run progress live (no reload)
and a batch's leaderboard and plots, with no console errors; hostile text stays text.
Screenshots go to $KLOOP_SCREENSHOTS (default: the test's tmp folder)."""

import os
import time
from pathlib import Path

import pytest

from tests.support.browser import Browser, find_chromium
from tests.support.service import QUICK_EVAL, ServerProcess, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_chromium() is None, reason="no chromium (bash docker/ci_setup.sh installs it)")]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = ServerProcess(tmp_path_factory.mktemp("web"), "--cpu-slots", "2", "--run-workers", "2").start()
    yield server, server.token("viewer")
    server.stop()


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("KLOOP_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_pages_render_live_without_console_errors(served, shots):
    server, token = served
    with Browser() as browser, server.client(token) as api:
        browser.open(server.url + "/")
        assert browser.evaluate("location.pathname") == "/login"
        browser.evaluate(f"document.querySelector('input[name=token]').value = {token!r}; document.querySelector('form[action=\"/login\"]').submit()")
        browser.pump(2)
        assert browser.evaluate("location.pathname") == "/" and browser.evaluate("document.querySelector('h1').textContent") == "Jobs"

        run = api.post("/v1/runs", json={"problem": "all_reduce", "model": "scripted:demo", "steps": 2, "allow_nccl": True,
                                         "trials": 2, "timed": False}).json()["id"]
        browser.open(f"{server.url}/jobs/{run}", settle_s=0.2)
        followed = browser.evaluate("document.querySelector('main').dataset.finished") == "false"
        assert followed or api.get(f"/v1/jobs/{run}").json()["status"] == "done"
        deadline = time.monotonic() + 600
        while api.get(f"/v1/jobs/{run}").json()["status"] not in ("done", "failed") and time.monotonic() < deadline:
            browser.pump(1)
        browser.pump(3)  # the last events reach the page; it redraws itself from them (never reloaded here)
        text = browser.evaluate("document.querySelector('#live').textContent")
        assert "Step 1" in text and "Step 2" in text and "LimitsExceeded" in text, text[:2000]
        assert browser.evaluate("document.querySelectorAll('pre.diff .add').length") >= 1  # the diff from step 1
        browser.evaluate("document.querySelectorAll('#live details').forEach(d => d.open = true)")
        browser.screenshot(shots / "run_view.png")
        assert browser.errors == []

        batch = api.post("/v1/batches", json={"config": {"models": ["scripted:demo", "scripted:example"], "problems": ["all_reduce"],
                                                          "samples": 2, "steps": 2, "allow_nccl": True, "trials": 1, "timed": False}}).json()["id"]
        browser.open(f"{server.url}/jobs/{batch}")
        deadline = time.monotonic() + 900
        while api.get(f"/v1/jobs/{batch}").json()["status"] not in ("done", "failed") and time.monotonic() < deadline:
            browser.pump(1)
        browser.pump(3)
        assert api.get(f"/v1/jobs/{batch}").json()["status"] == "done"
        text = browser.evaluate("document.querySelector('#live').textContent")
        assert "Leaderboard" in text and "4 of 4 episodes" in text
        assert browser.evaluate("document.querySelectorAll('svg.chart polyline').length") == 2
        board = browser.evaluate("[...document.querySelectorAll('table.board tbody tr')].map(r => r.cells[1].textContent)")
        assert board == ["scripted:demo", "scripted:example"]
        browser.screenshot(shots / "batch_view.png")
        episode = browser.evaluate("document.querySelector('table.small a').getAttribute('href')")
        browser.open(server.url + episode)
        assert "Step 1" in browser.evaluate("document.body.textContent")

        hostile = api.post("/v1/evals", json=dict(QUICK_EVAL, source="# </pre><script>console.error('pwned')</script><img src=x onerror=alert(1)>\n"
                                                                     + QUICK_EVAL["source"])).json()["id"]
        wait_for(api, hostile)
        browser.open(f"{server.url}/jobs/{hostile}")
        assert browser.evaluate("document.scripts.length") == 1 and browser.evaluate("document.querySelectorAll('img').length") == 0
        assert "<script>console.error('pwned')</script>" in browser.evaluate("document.querySelector('pre.code').textContent")
        browser.open(server.url + "/")
        later = api.post("/v1/evals", json=QUICK_EVAL).json()["id"]
        browser.pump(3)  # the jobs list refreshes itself
        assert later in browser.evaluate("document.querySelector('#job-rows').textContent")
        browser.screenshot(shots / "jobs.png", full_page=False)
        assert browser.errors == []
