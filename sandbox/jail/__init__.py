"""A confinement for one hostile process tree (candidate ranks, an agent's shell).

    spec = JailSpec(workdir=..., readable=[...], network="none", env={...}, devices="cuda")
    with Jail.start(spec, argv, pass_fds=(...)) as jail:
        jail.measures   # what held: "pid-namespace", "user:65534", "landlock-net", ...
        jail.gaps       # what did not, in words (the caller decides whether to go on)
        jail.wait(timeout_s)
    # leaving the block (or jail.kill()) ends the whole tree

Where the kernel allows it (kloop as root, or as a user with user namespaces), the tree gets
new PID, mount, network and IPC namespaces (a user namespace first when not root), runs as
an unprivileged uid (under root 65534, or one of its own: ``own_uid``) with every capability
dropped, no_new_privs, a seccomp filter, Landlock (files, TCP, signals, abstract unix sockets),
a private /tmp and /dev/shm, no /run, a fresh /proc, rlimits; it ends whole when its PID 1 exits. Inside a
Docker container (no namespaces) it keeps Landlock, no_new_privs, seccomp, rlimits, and ends
the tree by a kill(-1) that a Landlock signal scope confines to it; the container's /dev/shm is
shared there, and the harness sweeps it between evaluations (sandbox/jail/shared_shm.py). See
sandbox/jail/init.py.

Stdlib only: the init (``python -m sandbox.jail``) imports nothing else.
"""

from sandbox.jail.jail import Jail
from sandbox.jail.spec import JailError, JailSpec, own_uid

__all__ = ["Jail", "JailError", "JailSpec", "own_uid"]
