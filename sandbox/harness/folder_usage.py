"""How much a folder that hostile processes write holds: the rank's work folder
(memory_watch.py) and a compiler's build folder (confined_exec.py). Standard library only: the
compiler's jail imports it."""

from __future__ import annotations

import os

MAX_ENTRIES = 200_000  # files and folders in one such folder: beyond, counting them is the attack


def folder_bytes(folder: str) -> tuple[int, int]:
    """Bytes allocated to what ``folder`` holds (each file once), and how many entries were counted:
    the count stops past MAX_ENTRIES. Links are not followed."""
    seen, total, entries = set(), 0, 0
    pending = [folder]
    while pending and entries <= MAX_ENTRIES:
        try:
            scanner = os.scandir(pending.pop())
        except OSError:
            continue
        with scanner:
            for entry in scanner:
                entries += 1
                try:
                    found = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif (found.st_dev, found.st_ino) not in seen:
                    seen.add((found.st_dev, found.st_ino))
                    total += found.st_blocks * 512
    return total, entries
