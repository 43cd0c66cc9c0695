"""The jail's view of the filesystem, set up by its PID 1 in a private mount namespace.

- /tmp and /dev/shm: fresh tmpfs, shared by the tree, gone when the namespace goes, each of
  ``tmpfs_bytes`` at most (host memory: a write past it fails with ENOSPC).
- /run (and /var/run when it is a folder of its own): an empty tmpfs, so no daemon's socket
  (docker.sock, dbus, a harness's) can be reached by path.
- /proc: a fresh proc of the jail's PID namespace (no process outside is visible).
- Folders the tree's uid could not pass through (/root when kloop runs from a venv there):
  an empty read-only tmpfs over them, so that only what the tree needs shows through.
Paths the tree needs that lie under any of these (its work dir under /tmp, a venv under
/root) are bind-mounted back at the same place, read-only unless it is the work dir.
"""

from __future__ import annotations

import os
import stat

from sandbox.jail import kernel as k

PRIVATE = {"/tmp": "private-tmp", "/dev/shm": "private-shm", "/run": "hidden-run", "/var/run": "hidden-run"}


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _searchable(path: str, uid: int, gid: int) -> bool:
    st = os.stat(path)
    if st.st_uid == uid:
        return bool(st.st_mode & 0o100)
    if st.st_gid == gid:
        return bool(st.st_mode & 0o010)
    return bool(st.st_mode & 0o001)


def _first_closed_ancestor(path: str, uid: int, gid: int) -> str | None:
    parts = path.strip("/").split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        ancestor = "/" + "/".join(parts[:depth])
        if not _searchable(ancestor, uid, gid):
            return ancestor
    return None


def closed_ancestors(paths, uid: int, gid: int) -> set[str]:
    """For each path, the outermost folder above it that ``uid`` cannot pass through."""
    return {a for p in paths if (a := _first_closed_ancestor(p, uid, gid))}


def _outermost(paths: set[str]) -> list[str]:
    return sorted(p for p in paths if not any(q != p and _under(p, q) for q in paths))


def overmount(roots: set[str], keep: dict[str, bool], tmpfs_bytes: int | None = None) -> list[str]:
    """Cover each of ``roots`` with an empty tmpfs, then bind back at the same place each path of
    ``keep`` (path -> writable) that lies under one. A root that is, or is under, a kept path is
    left alone. Returns a measure per root covered."""
    roots = [r for r in _outermost(roots) if not any(_under(r, p) for p in keep)]
    kept = [p for p in sorted(keep) if any(_under(p, r) for r in roots)]
    fds = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in kept}
    try:
        for root in roots:
            scratch = root in ("/tmp", "/dev/shm")
            options = "mode=1777" + (f",size={int(tmpfs_bytes)}" if tmpfs_bytes else "") if scratch else "mode=0755"
            k.mount("tmpfs", root, "tmpfs", k.MS_NOSUID | k.MS_NODEV, options)
        bound: list[str] = []
        for path in kept:
            if not any(_under(path, b) and keep[b] == keep[path] for b in bound):  # else visible through that bind
                _bind(fds[path], path, writable=keep[path])
                bound.append(path)
        for root in roots:
            if root not in PRIVATE:
                k.mount(None, root, None, k.MS_REMOUNT | k.MS_RDONLY | k.MS_NOSUID | k.MS_NODEV)
    finally:
        for fd in fds.values():
            os.close(fd)
    return sorted({PRIVATE.get(root, f"masked:{root}") for root in roots})


def prepare(config: dict, mount_proc: bool) -> list[str]:
    """Set up the view described above; returns the measures that held."""
    k.mount(None, "/", None, k.MS_REC | k.MS_PRIVATE)
    keep = {os.path.realpath(p): False for p in config["read"]}
    keep[config["workdir"]] = True
    roots = {p for p in PRIVATE if os.path.isdir(p) and not os.path.islink(p)}
    if config["root"] and config["uid"] != 0:
        roots |= closed_ancestors(keep, config["uid"], config["gid"])
    measures = overmount(roots, keep, config.get("tmpfs_bytes"))
    if mount_proc:
        try:
            k.mount("proc", "/proc", "proc", k.MS_NOSUID | k.MS_NODEV | k.MS_NOEXEC)
            measures.append("private-proc")
        except OSError:
            pass  # a user namespace may not mount proc over a partly hidden one; Landlock still guards /proc/<pid>
    return measures


def _bind(fd: int, path: str, writable: bool) -> None:
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.makedirs(path, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        if not os.path.exists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
    k.mount(f"/proc/self/fd/{fd}", path, None, k.MS_BIND | k.MS_REC)
    if not writable:
        try:
            k.remount_bind_readonly(path)
        except OSError:
            pass  # Landlock refuses writes there anyway
