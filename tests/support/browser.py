"""Headless Chromium (Debian's ``chromium``; ``docker/ci_setup.sh`` installs it) driven over the
DevTools protocol: open pages (served or local files), set a cookie, collect console messages,
errors and uncaught exceptions, evaluate JavaScript, take screenshots. A small client (websockets'
sync API), enough for the web page's and the batch report's tests; and a small PNG reader to look
at a screenshot's pixels."""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

BINARIES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    return next((path for path in map(shutil.which, BINARIES) if path), None)


class Browser:
    """One headless Chromium with one page. ``errors`` collects console errors, uncaught
    exceptions and failed loads, with the page's URL at the time."""

    def __init__(self, width: int = 1366, height: int = 900):
        binary = find_chromium()
        if binary is None:
            raise RuntimeError("no chromium: apt-get install -y chromium")
        self.profile = tempfile.mkdtemp(prefix="kloop-chromium-")
        self.process = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--disable-extensions", "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        url = self._devtools_url()
        port = re.search(r":(\d+)/", url).group(1)
        page = self._page_target(int(port))
        self._connection = connect(page, max_size=64 * 2**20, open_timeout=30)
        self.ws = self._connection.__enter__()
        self._ids = itertools.count(1)
        self.errors: list[str] = []
        self.console: list[str] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _devtools_url(self, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line and self.process.poll() is not None:
                raise RuntimeError("chromium exited before it listened")
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            if match:
                return match.group(1)
        raise RuntimeError("chromium did not listen in time")

    @staticmethod
    def _page_target(port: int) -> str:
        import httpx

        for _ in range(100):
            targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise RuntimeError("chromium has no page")

    def _note(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", []))
            self.console.append(f"{params.get('type')}: {text}")
            if params.get("type") in ("error", "assert"):
                self.errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log: {entry.get('text')} ({entry.get('url', '')})")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            self.errors.append(f"load failed: {params.get('errorText')}")

    def call(self, method: str, timeout_s: float = 60.0, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        self.ws.send(json.dumps({"id": number, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == number:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._note(message)

    def pump(self, seconds: float) -> None:
        """Let the page run (its timers, its event stream) for ``seconds``, collecting what it reports."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self._note(json.loads(self.ws.recv(timeout=left)))
            except TimeoutError:
                return

    def set_cookie(self, url: str, name: str, value: str) -> None:
        self.call("Network.setCookie", url=url, name=name, value=value, httpOnly=True, sameSite="Strict")

    def open(self, url: str, settle_s: float = 1.0) -> None:
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 60
        while self.evaluate("document.readyState") != "complete" and time.monotonic() < deadline:
            self.pump(0.1)
        self.pump(settle_s)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result.get("result", {}).get("value")

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000),
                                                            "scale": 1})
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced PNG, as Chromium writes them."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, idat, header = 8, b"", None
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    width, height, depth, color_type, _, _, interlace = header
    assert depth == 8 and interlace == 0 and color_type in (2, 6), header
    channels = 3 if color_type == 2 else 4
    raw, stride, rows, previous = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line) if channels == 3 else bytes(b for j in range(0, stride, 4) for b in line[j:j + 3]))
        previous = line
    return width, height, rows


def count_color(rows: list[bytes], rgb: tuple[int, int, int], tolerance: int = 12) -> int:
    count = 0
    for row in rows:
        for i in range(0, len(row), 3):
            if abs(row[i] - rgb[0]) <= tolerance and abs(row[i + 1] - rgb[1]) <= tolerance and abs(row[i + 2] - rgb[2]) <= tolerance:
                count += 1
    return count
