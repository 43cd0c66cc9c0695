"""A real headless Chromium (Debian's ``chromium`` package; ``docker/ci_setup.sh`` installs it):
a page's screenshot and every console message it logged, and a small PNG reader to look at the
screenshot's pixels."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]?\s*(.*)")


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def screenshot(page: Path, png: Path, size: tuple[int, int] = (1300, 2600), timeout_s: float = 180) -> list[str]:
    """Render ``page``, write its screenshot to ``png``; returns the console messages (errors and logs)."""
    result = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr",
                             "--v=0", f"--screenshot={png}", f"--window-size={size[0]},{size[1]}", page.resolve().as_uri()],
                            capture_output=True, text=True, timeout=timeout_s)
    if not png.exists():
        raise RuntimeError(f"chromium made no screenshot (exit {result.returncode}): {result.stderr[-2000:]}")
    return [match.group(1) for line in result.stderr.splitlines() if (match := CONSOLE.search(line))]


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
