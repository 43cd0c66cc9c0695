"""The batch report in a real headless Chromium: it renders, logs nothing to the console, and its
screenshot shows the plots (the series' colours, the heat map's greens); and the page is
self-contained (nothing fetched from anywhere)."""

import re

import pytest

from agent.batch.report import write_html
from agent.batch.svg import PALETTE
from tests.support.batch import hand_fixture, result, write_batch_folder
from tests.support.browser import Browser, count_color, find_chromium, read_png

pytestmark = pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (docker/ci_setup.sh installs it)")


def rgb(hex_color: str) -> tuple[int, int, int]:
    return tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    results = hand_fixture() + [result("baseline:reference", p, 0, "correct", 1.0, [0.9, 1.1], [("correct", 1.0)],
                                       category="collective" if p == "p1" else "tp") for p in ("p1", "p2")]
    folder = write_batch_folder(root / "batch", results)
    html = folder / "report.html"
    write_html([folder], html, resamples=200)
    png = root / "report.png"
    with Browser(width=1300, height=2600) as browser:
        browser.open(html.resolve().as_uri())
        browser.screenshot(png, full_page=False)
    return {"html": html, "png": png, "messages": browser.console + browser.errors}


def test_the_page_renders_without_console_messages(page):
    assert page["messages"] == []
    width, height, rows = read_png(page["png"])
    assert (width, height) == (1300, 2600)


def test_the_screenshot_shows_the_plots(page):
    _, _, rows = read_png(page["png"])
    for color in PALETTE[:3]:  # three models: three series colours in the line charts and the scatter plot
        assert count_color(rows, rgb(color)) > 150, color
    greens = count_color(rows, (44, 160, 44), tolerance=40)  # the heat map's correct-share cells
    assert greens > 500


def test_the_page_is_self_contained(page):
    text = page["html"].read_text()
    assert not re.search(r"""(src|href)=["']?https?:""", text)
    assert "@import" not in text and "<link" not in text
    assert text.count("<svg") == 6
    assert 'href="runs/a__p1__s0/try1/trajectory.traj.json"' in text


def test_the_console_check_catches_errors(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom'); missing();</script></body></html>")
    with Browser(width=400, height=300) as browser:
        browser.open(bad.resolve().as_uri())
    assert any("boom" in m for m in browser.errors) and any("missing is not defined" in m for m in browser.errors)
