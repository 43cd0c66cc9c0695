"""Tiny programs the Docker backend runs inside its containers with ``python3 -S -c``.

They are trusted code in an untrusted place: they take paths and limits as arguments, never
follow a path out of the work dir, and print only what the backend asks for.
"""

# PID 1 of every sandbox container. It exits when its stdin reaches EOF (the daemon closes it
# when the attached client goes away, including a client killed with SIGKILL) or when the
# container's lifetime is over; the kernel then kills everything else in the container. It
# installs no handler for terminating signals, so nothing inside the container can stop it
# (PID 1 ignores signals it does not handle), and reaps the orphans that land on it.
KEEPER = r"""
import os, select, signal, sys, time
def reap(*_):
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
signal.signal(signal.SIGCHLD, reap)
deadline = time.monotonic() + float(sys.argv[1])
while True:
    left = deadline - time.monotonic()
    if left <= 0:
        break
    try:
        ready, _, _ = select.select([0], [], [], min(left, 3600))
        if ready and not os.read(0, 65536):
            break
    except InterruptedError:
        continue
    except OSError:
        break
os._exit(0)
"""

# Kill every process in the container but PID 1 and this one (what a command left behind),
# then print how many were killed and the cgroup's OOM-kill count (v1 or v2).
SWEEP = r"""
import os, time
me = os.getpid()
killed = 0
def alive():
    found = []
    for entry in os.listdir('/proc'):
        if entry.isdigit() and int(entry) not in (1, me, os.getppid()):
            try:
                with open('/proc/%s/stat' % entry) as f:
                    if f.read().rsplit(')', 1)[1].split()[0] != 'Z':
                        found.append(int(entry))
            except (OSError, IndexError):
                pass
    return found
for _ in range(50):
    pids = alive()
    if not pids:
        break
    for pid in pids:
        try:
            os.kill(pid, 9)
            killed += 1
        except OSError:
            pass
    time.sleep(0.02)
oom = 0
for path in ('/sys/fs/cgroup/memory.events', '/sys/fs/cgroup/memory/memory.oom_control'):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith('oom_kill '):
                    oom = int(line.split()[1])
    except OSError:
        pass
print(killed, oom)
"""

# read ROOT PATH LIMIT: the first LIMIT bytes of ROOT/PATH (symlinks resolved, must stay in ROOT).
READ = r"""
import os, sys
root = os.path.realpath(sys.argv[1])
path = os.path.realpath(os.path.join(root, sys.argv[2]))
if not path.startswith(root + os.sep):
    sys.stderr.write('outside'); sys.exit(3)
try:
    with open(path, 'rb') as f:
        sys.stdout.buffer.write(f.read(int(sys.argv[3])))
except FileNotFoundError:
    sys.stderr.write('missing'); sys.exit(4)
except OSError as e:
    sys.stderr.write(e.strerror or str(e)); sys.exit(5)
"""

# write ROOT PATH < content: create ROOT/PATH (and its folders) from stdin.
WRITE = r"""
import os, shutil, sys
root = os.path.realpath(sys.argv[1])
path = os.path.realpath(os.path.join(root, sys.argv[2]))
if not path.startswith(root + os.sep):
    sys.stderr.write('outside'); sys.exit(3)
try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as f:
        shutil.copyfileobj(sys.stdin.buffer, f, 1 << 20)
except OSError as e:
    sys.stderr.write(e.strerror or str(e)); sys.exit(5)
"""

# The kernel's Landlock ABI version as seen from inside the container (0: none or blocked).
LANDLOCK_ABI = "import ctypes; print(max(ctypes.CDLL(None).syscall(444, None, ctypes.c_size_t(0), 1), 0))"
