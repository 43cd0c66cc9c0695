"""kloop's commands inside the agent's shell: ``check``, ``bench``, ``profile``, ``submit``.

Runs in the jail (``python3 -S -B -P tool.py NAME ARGS...``), stdlib only. It reads the file
itself, hands a private channel to the trusted runner over the inherited socket
``KLOOP_TOOL_FD`` (SCM_RIGHTS), writes its request there and prints the reply. Nothing here is
trusted: the runner checks every request again.
"""

import json
import os
import socket
import sys

MAX_SOURCE_BYTES = 512 * 1024
MAX_REPLY_BYTES = 4 * 2**20
USAGE = {
    "check": "check FILE [--world N] [--device cuda|emulate|cpu] [--size NAME]\n"
             "  correctness of FILE on every rank, public seeds, through the real harness",
    "bench": "bench FILE [--world N] [--size NAME]\n  correctness, then timing against the reference (not in emulate mode)",
    "profile": "profile FILE [--world N] [--size NAME]\n"
               "  timing plus a profile: top kernels, busy/idle, achieved bandwidth against the roofline (cuda)",
    "submit": "submit FILE\n  hand FILE in as your final answer; it is judged with hidden seeds and the episode ends",
}
OPTIONS = {"--world": int, "--device": str, "--size": str}


def parse(name, args):
    if not args or args[0] in ("-h", "--help"):
        raise SystemExit(f"usage: {USAGE[name]}")
    path, options, rest = None, {}, list(args)
    while rest:
        item = rest.pop(0)
        if item in OPTIONS and name != "submit":
            if not rest:
                raise SystemExit(f"{name}: {item} needs a value\nusage: {USAGE[name]}")
            value = rest.pop(0)
            try:
                options[item[2:]] = OPTIONS[item](value)
            except ValueError:
                raise SystemExit(f"{name}: {item} takes a number, not {value!r}") from None
        elif item.startswith("-") or path is not None:
            raise SystemExit(f"{name}: unexpected argument {item!r}\nusage: {USAGE[name]}")
        else:
            path = item
    if path is None:
        raise SystemExit(f"usage: {USAGE[name]}")
    return path, options


def read_source(name, path):
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SOURCE_BYTES + 1)
    except OSError as error:
        raise SystemExit(f"{name}: cannot read {path}: {error.strerror}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise SystemExit(f"{name}: {path} is larger than {MAX_SOURCE_BYTES // 1024} KiB")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise SystemExit(f"{name}: {path} is not UTF-8 text") from None


def call(request):
    try:
        shared = socket.socket(fileno=os.dup(int(os.environ["KLOOP_TOOL_FD"])))
    except (KeyError, ValueError, OSError):
        raise SystemExit("kloop's commands work only inside the agent's shell (no KLOOP_TOOL_FD)") from None
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with shared, mine:
        socket.send_fds(shared, [b"request"], [theirs.fileno()])
        theirs.close()
        mine.sendall(json.dumps(request).encode())
        mine.shutdown(socket.SHUT_WR)
        chunks, size = [], 0
        while chunk := mine.recv(65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                break
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        raise SystemExit("no reply from kloop (the command's time ran out, or the sandbox is ending)") from None


def main(argv):
    if not argv or argv[0] not in USAGE:
        raise SystemExit("usage: tool.py {check,bench,profile,submit} ARGS")
    name = argv[0]
    path, options = parse(name, argv[1:])
    reply = call({"tool": name, "file": path, "source": read_source(name, path), "options": options})
    text = reply.get("text", "")
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
    sys.stdout.flush()
    return int(reply.get("exit_code", 1))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
