"""The agent's shell: one bash command at a time in a jail, with kloop's commands inside it.

Runs inside the sandbox (any backend), started per command by the controller as
``python -m sandbox.shell --config FILE``. Trusted code; the command it runs is not.

Layout of a shell's root folder (the controller makes it, one per episode)::

    home/       the jail's work dir and the command's cwd: the only folder it may write
    packages/   a private copy of kloop_runtime (``from sandbox import runtime``), readable
    tools/      the client of kloop's commands (check, bench, profile, submit), readable
    spool/      requests to the controller and its replies; out of the jail's reach

The jail (sandbox.jail) is the one the judge's candidate ranks get: namespaces, an unprivileged
uid, no capabilities, seccomp, Landlock, no network, an allow-listed environment without
keys, caches or project packages; the whole tree is killed when the command ends or times out.
kloop's commands reach the runner over an inherited socket (``KLOOP_TOOL_FD``): each call hands
over a private channel, sends its request (the file's text, never a path the runner opens) and
gets the rendered reply. The runner passes requests to the controller through ``spool/`` and
waits for its answer; the controller runs the harness outside the jail.
"""
