"""Removing a folder that hostile code may have filled: at any depth, links removed and never
followed, and no error raised (what cannot be removed stays; the caller's sweep comes back to it).

``shutil.rmtree`` recurses once a level: a candidate's chain of 3000 nested folders in its work
folder, or a build's in the compile cache, raised RecursionError out of the sandbox's close (a
traceback instead of a report) and out of a build's temporary folder (left in the cache), and
the tree stayed on the host (tests/fixtures/hostile/deep_folder_chain.py). There ``rm -rf``,
which walks a tree of any depth without following links, finishes the job."""

from __future__ import annotations

import os
import shutil
import subprocess


def remove_tree(path: str | os.PathLike) -> None:
    """Remove ``path`` (a folder, a file or a link) and everything under it."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except (OSError, RecursionError):
        pass  # a link, a file, or a tree too deep or with entries rmtree could not open: rm -rf below
    rm = shutil.which("rm") or "/bin/rm"
    subprocess.run([rm, "-rf", "--one-file-system", "--", os.fspath(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
