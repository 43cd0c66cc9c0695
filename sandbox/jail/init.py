"""The jail's init: ``python -S -B -P -m sandbox.jail CONFIG_FD CONTROL_FD STATUS_FD``.

Three trusted processes, stdlib only, then the hostile tree:
- the keeper (the caller's child): creates the namespaces (a user namespace first when not
  root), hands the work dir to the tree's uid, forks the supervisor and kills it when the
  control pipe closes (the caller ended the jail, or died). Without a PID namespace it holds
  a Landlock signal scope and is the tree's subreaper, and ends the tree with kill(-1, SIGKILL),
  which that scope limits to its own descendants.
- the supervisor: PID 1 of the jail's PID namespace (when there is one); sets up the mounts
  (sandbox.jail.mounts) and loopback, forks the payload, reports what held, reaps every
  process, and exits when the payload exits: the kernel then kills the rest of the namespace.
- the payload: its own session, rlimits, privileges dropped (uid, groups, every capability
  set), no_new_privs, seccomp, Landlock, then exec of argv with the caller's environment.
Every step that fails is left out of the measures; the caller reads them, and the gaps.
STATUS_FD gets JSON lines: {"event": "started", "measures": [...]} or {"event": "failed",
"error": "..."}, then {"event": "exit", "returncode": n} (negative: killed by that signal).
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import stat
import time

from sandbox.jail import kernel, landlock, mounts, seccomp
from sandbox.readiness import wait_readable

_NAMESPACES = ((kernel.CLONE_NEWPID, "pid-namespace"), (kernel.CLONE_NEWNS, "mount-namespace"),
               (kernel.CLONE_NEWNET, "net-namespace"), (kernel.CLONE_NEWIPC, "ipc-namespace"))
# System V IPC in the jail's own IPC namespace, bounded as its /dev/shm is: its objects belong to no process, so neither
# the parent's memory watch nor the OOM killer frees them while any process of the tree lives, and a namespace's
# defaults let one tree hold all of the host's memory in shared memory segments (sandbox/harness/memory_watch.py).
# Shared memory gets the tree's tmpfs size in all (kernel/shmall counts pages; CUDA 13's libcudart imports shmget, so
# segments stay as many as the kernel allows); message queues and semaphore sets 256 each (kernel/sem: semmsl semmns
# semopm semmni): neither libcudart nor torch 2.13's CPU libraries import msgget or semget.
SYSV_QUEUES = 256
_SYSV_FIXED = {"kernel/msgmni": str(SYSV_QUEUES), "kernel/sem": f"250 64000 32 {SYSV_QUEUES}"}
_RLIMITS = {"core": resource.RLIMIT_CORE, "nofile": resource.RLIMIT_NOFILE, "fsize": resource.RLIMIT_FSIZE,
            "nproc": resource.RLIMIT_NPROC}


def _send(fd: int, **event) -> None:
    event = {key: value[:2000] if isinstance(value, str) else value for key, value in event.items()}
    try:
        os.write(fd, (json.dumps(event) + "\n").encode())
    except OSError:
        pass  # the caller is gone; the jail ends with it


def _exit_code(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode


def _detach_stdio_and_passed_fds(config: dict) -> None:
    """Trusted processes keep no copy of the tree's stdio or passed fds (the caller must see EOF
    when the tree is gone)."""
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for fd in config["pass_fds"]:
        try:
            os.close(fd)
        except OSError:
            pass


# ---------------------------------------------------------------------- keeper
def main(args: list[str]) -> int:
    config_fd, control_fd, status_fd = (int(a) for a in args)
    with os.fdopen(config_fd, "rb") as handle:
        config = json.loads(handle.read())
    for fd in (control_fd, status_fd):
        os.set_inheritable(fd, False)
    try:
        measures = _enter_namespaces(config)
        if config["root"] and config["uid"] != 0:
            _hand_over(config["workdir"], config["uid"], config["gid"])
        scoped = False
        if "pid-namespace" not in measures:
            scoped = _attempt(landlock.scope_signals_only, False)
            if scoped:
                measures.append("scoped-kill")
            kernel.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1)
    except Exception as error:  # noqa: BLE001 - reported to the caller, who raises JailError
        _send(status_fd, event="failed", error=f"jail set-up failed: {type(error).__name__}: {error}")
        return 1
    alive_r, alive_w = os.pipe()
    session_r, session_w = os.pipe2(os.O_NONBLOCK)
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        os.close(session_r)
        code = 1
        try:
            code = _supervise(config, measures, status_fd, alive_r, session_w)
        except BaseException as error:  # noqa: BLE001
            _send(status_fd, event="failed", error=f"jail set-up failed: {type(error).__name__}: {error}")
        os._exit(code)
    os.close(alive_r)
    os.close(session_w)
    os.close(status_fd)
    _detach_stdio_and_passed_fds(config)
    status = _keep(pid, control_fd)
    if "pid-namespace" not in measures:
        _end_tree(scoped, session_r)
    if os.WIFSIGNALED(status):  # die the same way, so that the caller sees the signal
        if os.WTERMSIG(status) != signal.SIGKILL:
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)


def _enter_namespaces(config: dict) -> list[str]:
    measures = []
    if not config["root"]:
        try:
            kernel.unshare(kernel.CLONE_NEWUSER)
        except OSError:
            return []  # e.g. Docker's seccomp profile: no namespaces at all
        with open("/proc/self/setgroups", "w") as handle:
            handle.write("deny")
        with open("/proc/self/uid_map", "w") as handle:
            handle.write(f"{config['uid']} {config['uid']} 1")
        with open("/proc/self/gid_map", "w") as handle:
            handle.write(f"{config['gid']} {config['gid']} 1")
        measures.append("user-namespace")
    try:
        kernel.unshare(sum(flag for flag, _ in _NAMESPACES))
        measures += [name for _, name in _NAMESPACES]
    except OSError:
        for flag, name in _NAMESPACES:
            try:
                kernel.unshare(flag)
                measures.append(name)
            except OSError:
                pass
    if "ipc-namespace" in measures and _attempt(lambda: _bound_sysv_ipc(config["tmpfs_bytes"]), False):
        measures.append("sysv-ipc-bounded")
    return measures


def _bound_sysv_ipc(shm_bytes: int) -> bool:
    """The jail's IPC namespace (this process is in it) bounded: ``shm_bytes`` of shared memory in
    all, and _SYSV_FIXED. A user's jail, whose user namespace maps no root, is refused the writes."""
    limits = {"kernel/shmmax": str(shm_bytes), "kernel/shmall": str(-(-shm_bytes // os.sysconf("SC_PAGE_SIZE"))), **_SYSV_FIXED}
    for name, value in limits.items():
        with open(f"/proc/sys/{name}", "w") as handle:
            handle.write(value)
    return True


def _hand_over(workdir: str, uid: int, gid: int) -> None:
    """What the trusted caller put in the work dir becomes the tree's: entries root owns, but
    never a file with several links (one a tree of an earlier jail could have planted)."""
    paths = [workdir] + [os.path.join(top, name) for top, dirs, files in os.walk(workdir) for name in dirs + files]
    for path in paths:
        st = os.lstat(path)
        if st.st_uid == 0 and not (stat.S_ISREG(st.st_mode) and st.st_nlink > 1):
            os.chown(path, uid, gid, follow_symlinks=False)


def _keep(pid: int, control_fd: int) -> int:
    """Wait for the supervisor; kill it when the control pipe closes or on SIGTERM/SIGINT/SIGHUP."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    for fd in (control_fd, wake_r, pidfd):
        poller.register(fd, select.POLLIN)
    while True:
        ready = dict(poller.poll())
        if pidfd in ready:
            break
        if control_fd in ready or wake_r in ready:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            poller.unregister(control_fd)
            poller.unregister(wake_r)
    return os.waitpid(pid, 0)[1]


def _reap() -> bool:
    """Reap whatever has exited; False once this process has no child left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _end_tree(scoped: bool, session_r: int) -> None:
    """Without a PID namespace: kill every process of the tree. Under the Landlock signal scope,
    kill(-1) reaches this process's descendants (however they forked or left their session)
    and nothing else; the tree's orphans come here (subreaper) to be reaped. Without the scope
    only the payload's session can be killed (a reported gap)."""
    if not scoped:
        try:
            os.killpg(int(os.read(session_r, 32) or b"0"), signal.SIGKILL)
        except (OSError, ValueError):
            pass  # no session was started, or it is gone
        time.sleep(0.05)
        _reap()
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        os.kill(-1, signal.SIGKILL)
        if not _reap():
            return
        time.sleep(0.01)


# ---------------------------------------------------------------------- supervisor
def _supervise(config: dict, measures: list[str], status_fd: int, alive_r: int, session_w: int) -> int:
    kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
    if wait_readable([alive_r], 0):
        return 1  # the keeper died before the line above
    os.close(alive_r)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # PID 1 ignores signals it has no handler for
    pid_namespace = "pid-namespace" in measures
    if "mount-namespace" in measures:
        measures += mounts.prepare(config, mount_proc=pid_namespace)
    if "net-namespace" in measures and config["network"] == "loopback":
        if _attempt(kernel.loopback_up, False):
            measures.append("loopback-only")
    if not pid_namespace:
        kernel.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1)
    kernel.prctl(kernel.PR_SET_DUMPABLE, 0)
    report_r, report_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(report_r)
        os.close(session_w)
        _run_payload(config, measures, report_w)
    os.close(report_w)
    os.write(session_w, str(child).encode())  # the payload's session, for the keeper's last resort
    os.close(session_w)
    _detach_stdio_and_passed_fds(config)
    with os.fdopen(report_r, "rb") as handle:
        lines = handle.read().decode(errors="replace").splitlines()
    report = json.loads(lines[-1]) if lines else {"error": "the payload died during set-up"}
    if "error" in report:
        _send(status_fd, event="failed", error=report["error"])
    else:
        _send(status_fd, event="started", measures=report["measures"])
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            break
    returncode = os.waitstatus_to_exitcode(status)
    if "error" not in report:
        _send(status_fd, event="exit", returncode=returncode)
    return _exit_code(returncode)


# ---------------------------------------------------------------------- payload
def _run_payload(config: dict, measures: list[str], report_fd: int) -> None:
    try:
        os.setsid()
        measures.append("own-session")
        workdir = config["workdir"]
        os.chdir(workdir)
        _set_rlimits(config["rlimits"])
        measures.append("rlimits")
        if _attempt(_first_for_the_oom_killer, False):
            measures.append("oom-first")
        _drop_privileges(config, measures)
        kernel.set_no_new_privs()
        measures.append("no-new-privs")
        private_tmp = "private-tmp" in measures
        tmpdir = "/tmp" if private_tmp else os.path.join(workdir, ".tmp")
        os.makedirs(tmpdir, exist_ok=True)
        write = [workdir, "/dev/shm"] + (["/tmp"] if private_tmp else [])
        if any("nvidia" in path for path in config["devices"]):
            write.append("/proc")  # the CUDA driver writes its own /proc files (else: error 304 at init); file permissions still apply
        if _attempt(seccomp.install, False):
            measures.append("seccomp")
        measures += _attempt(lambda: landlock.restrict(read=config["read"], write=write, devices=config["devices"],
                                                       deny_tcp=config["network"] == "none"), [])
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", **config["env"], "HOME": workdir, "TMPDIR": tmpdir}
        _close_fds(keep=[*config["pass_fds"], report_fd])
        for fd in config["pass_fds"]:
            os.set_inheritable(fd, True)
        os.write(report_fd, (json.dumps({"measures": measures}) + "\n").encode())
    except BaseException as error:  # noqa: BLE001 - everything goes back as a message
        _send(report_fd, error=f"jail set-up failed: {type(error).__name__}: {error}")
        os._exit(127)
    try:
        os.execvpe(config["argv"][0], config["argv"], env)
    except OSError as error:
        _send(report_fd, error=f"cannot execute {config['argv'][0]!r} in the jail: {error.strerror}")
    os._exit(127)


def _first_for_the_oom_killer() -> bool:
    """The tree first in line for the kernel's OOM killer (oom_score_adj 1000, inherited; written
    while privileged, under root, it is also the floor the tree cannot go below; a jail started by
    a user may be refused the write, and goes on without it). Memory the parent's watch
    cannot see (socket buffers, SysV segments: sandbox/harness/memory_watch.py) would otherwise
    leave the kernel choosing by resident memory, the harness or a reference as likely as the tree."""
    with open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("1000")
    return True


def _attempt(step, otherwise):
    """A measure the kernel may refuse (an old kernel, a container's seccomp profile): without it
    the jail goes on, and the caller sees it missing from the measures."""
    try:
        return step()
    except OSError:
        return otherwise


def _set_rlimits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        which = _RLIMITS[name]
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):  # above a hard limit this process may not raise
            hard = resource.getrlimit(which)[1]
            soft = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (soft, soft))


def _drop_privileges(config: dict, measures: list[str]) -> None:
    uid, gid = config["uid"], config["gid"]
    kernel.drop_capability_bounds()
    if config["root"]:
        os.setgroups([])
    if os.getresgid() != (gid, gid, gid):
        os.setresgid(gid, gid, gid)
    if os.getresuid() != (uid, uid, uid):
        os.setresuid(uid, uid, uid)
    kernel.clear_capabilities()
    if kernel.capabilities_empty():
        measures.append("caps-dropped")
    measures.append(f"user:{os.getuid()}")


def _close_fds(keep: list[int]) -> None:
    low = 3
    for fd in sorted(set(keep)):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
