"""nvcc for one CUDA source, with its two front ends at once (torch's ``PYTORCH_NVCC`` hook: the
extension builder names this script as torch's nvcc; run by path, it imports nothing of ours).

nvcc compiles a ``.cu`` in one chain: preprocess for the host, ``cudafe++`` (the host front end),
preprocess for the device, ``cicc`` (the device front end), ``ptxas``, ``fatbinary``, then the
host compile. Over torch's headers each front end parses the whole translation unit on one core
(15-22 s each on the H200 and H100 hosts), one after the other. They depend on each other only
through the module id: a name ``cudafe++`` derives and writes to a file (``--gen_module_id_file``)
for ``cicc`` to read, so that both sides name the kernels of an anonymous namespace alike. Here the
id is written first, from a digest of the source and its options, the flag that makes
``cudafe++`` write it is dropped, and the host branch (preprocess, ``cudafe++``) runs beside the
device branch (preprocess, ``cicc``, ``ptxas``, ``fatbinary``); the host compile, which includes
the device branch's stub and fat binary, runs after both.

The steps are nvcc's own, read from ``nvcc --dryrun`` with the same options (its environment
lines included) and run as nvcc would run them. Whatever this does not recognise runs as plain
nvcc: a command line that is not one source compiled with ``-c`` to an object, relocatable
device code, a dry run with a step of an unknown kind, no module id step, or a dry run that fails.
``KLOOP_PARALLEL_NVCC=0`` turns it off. ``-MD -MF FILE`` (torch's dependency file for ninja) is
taken off and FILE written naming the source alone: each kloop build runs once, in a fresh folder.

    python nvcc_parallel.py NVCC_ARGS...        # the real nvcc: $KLOOP_NVCC, else nvcc on PATH
"""

import hashlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)")
RELOCATABLE = ("-rdc=true", "--relocatable-device-code=true", "-dc", "--device-c", "-dlink", "--device-link", "-lib", "--lib")
COMPILER = re.compile(r"(gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(-[\d.]+)?")  # the host compiler, by -ccbin's name too
DEVICE_TOOLS = {"cicc", "ptxas", "fatbinary"}


class Unrecognised(Exception):
    """The command line or its dry run is not one this runs in parallel: plain nvcc runs it."""


def real_nvcc() -> str:
    return os.environ.get("KLOOP_NVCC") or "nvcc"


def without_depfile(args: list[str]) -> tuple[list[str], str | None]:
    """``args`` without ``-MD`` and ``-MF FILE``, and FILE."""
    kept, depfile, skip = [], None, False
    for index, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == "-MD":
            continue
        elif arg == "-MF" and index + 1 < len(args):
            depfile, skip = args[index + 1], True
        else:
            kept.append(arg)
    return kept, depfile


def source_and_object(args: list[str]) -> tuple[str, str]:
    """The one ``.cu`` compiled with ``-c`` and its ``-o`` object."""
    if "-c" not in args and "--compile" not in args:
        raise Unrecognised("not a compile to an object: no -c")
    if any(arg in RELOCATABLE or arg.startswith(("-rdc=t", "--relocatable-device-code=t")) for arg in args):
        raise Unrecognised("relocatable device code")
    sources = [arg for arg in args if arg.endswith(".cu") and not arg.startswith("-")]
    outputs = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg in ("-o", "--output-file")]
    if len(sources) != 1 or len(outputs) != 1:
        raise Unrecognised("not one .cu source to one object")
    return sources[0], outputs[0]


def module_id(source: str, args: list[str]) -> str:
    """An identifier fragment like nvcc's own (``_<digest>_<length>_<file name>``), from the
    source's bytes and the options: the same build names its kernels the same."""
    digest = hashlib.sha256()
    with open(source, "rb") as handle:
        digest.update(handle.read())
    digest.update("\0".join(args).encode())
    stem = re.sub(r"\W", "_", os.path.basename(source))
    return f"_{digest.hexdigest()[:8]}_{len(stem)}_{stem}_kloop"


def _output(tokens: list[str]) -> str:
    index = tokens.index("-o") if "-o" in tokens else -1
    return tokens[index + 1] if 0 <= index < len(tokens) - 1 else ""


def plan(dry_run: str) -> tuple[dict[str, str], str, list[str], list[str], list[str]]:
    """From ``nvcc --dryrun``'s output: the environment it sets, the module id file, the host
    branch's commands, the device branch's, and those that run after both (in nvcc's order)."""
    env, host, device, after, id_files, programs = {}, [], [], [], [], []
    for raw in dry_run.splitlines():
        if not raw.startswith("#$ "):
            continue
        line = raw[3:].strip()
        assignment = ASSIGNMENT.fullmatch(line)
        if assignment:
            try:
                value = shlex.split(assignment.group(2))
            except ValueError:
                continue
            if len(value) <= 1:  # a list (LIBRARIES, SYSTEM_INCLUDES) is only spelled out in the commands
                env[assignment.group(1)] = value[0] if value else ""
            continue
        try:
            tokens = shlex.split(line)
        except ValueError as error:
            raise Unrecognised(f"a dry-run line that does not parse: {error}") from None
        program = os.path.basename(tokens[0]) if tokens else ""
        programs.append(program)
        compiler = COMPILER.fullmatch(program) is not None
        if "--gen_module_id_file" in tokens:
            index = tokens.index("--module_id_file_name") if "--module_id_file_name" in tokens else -1
            if index < 0 or index + 1 >= len(tokens):
                raise Unrecognised("a module id written with no file name")
            id_files.append(tokens[index + 1])
            line = line.replace(" --gen_module_id_file", "", 1)
        if program == "cudafe++":
            host.append(line)
        elif program in DEVICE_TOOLS:
            device.append(line)
        elif compiler and "-E" in tokens and _output(tokens).endswith(".cpp4.ii"):
            host.append(line)
        elif compiler and "-E" in tokens and _output(tokens).endswith(".cpp1.ii"):
            device.append(line)
        elif program == "rm":  # an intermediate file the dry run's fatbinary line does not name (nor make)
            after.append("rm -f" + line[2:])
        elif compiler and "-c" in tokens:
            after.append(line)
        else:
            raise Unrecognised(f"a step of an unknown kind: {line[:120]}")
    if len(id_files) != 1 or programs.count("cudafe++") != 1 or "cicc" not in programs or not after:
        raise Unrecognised("not one module id, one host front end, a device front end and a host compile")
    return env, id_files[0], host, device, after


class Steps:
    """Commands run through /bin/sh (as nvcc's dry run spells them), in order, until one fails;
    ``stop`` ends them from another thread."""

    def __init__(self, commands: list[str], env: dict[str, str]):
        self.commands, self.env = commands, env
        self.lock = threading.Lock()
        self.current: subprocess.Popen | None = None
        self.stopped = False
        self.rc, self.output, self.seconds = 0, "", 0.0

    def run(self) -> "Steps":
        started, output = time.monotonic(), []
        for command in self.commands:
            with self.lock:
                if self.stopped:
                    break
                self.current = subprocess.Popen(["/bin/sh", "-c", command], env=self.env, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT, text=True, errors="replace")
            output.append(self.current.communicate()[0])
            if self.current.returncode != 0:
                self.rc = self.current.returncode
                break
        self.output, self.seconds = "".join(output), time.monotonic() - started
        return self

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            if self.current is not None and self.current.poll() is None:
                self.current.kill()


def compile_in_parallel(args: list[str], depfile: str | None) -> int:
    """The host and device branches at once, then the host compile. What fails is told as nvcc
    tells it, which runs the host front end first: its errors alone if it fails (the device branch
    is stopped), else its output and the device branch's."""
    source, obj = source_and_object(args)
    with tempfile.TemporaryDirectory(prefix="nvcc-") as scratch:
        env = {**os.environ, "TMPDIR": scratch}  # nvcc's intermediate files, named by the dry run, land here
        try:
            dry = subprocess.run([real_nvcc(), "--dryrun", *args], env=env, capture_output=True, text=True, errors="replace")
        except OSError as error:
            raise Unrecognised(f"the dry run did not start: {error}") from None
        if dry.returncode != 0:
            raise Unrecognised("the dry run failed")
        nvcc_env, id_file, host_commands, device_commands, after_commands = plan(dry.stderr + dry.stdout)
        env.update(nvcc_env)
        with open(id_file, "w") as handle:
            handle.write(module_id(source, args))
        host, device = Steps(host_commands, env), Steps(device_commands, env)
        with ThreadPoolExecutor(max_workers=2) as pool:
            host_done, device_done = pool.submit(host.run), pool.submit(device.run)
            if host_done.result().rc != 0:
                device.stop()
                sys.stderr.write(host.output)
                return host.rc
            device_done.result()
        sys.stderr.write(host.output + device.output)
        if device.rc != 0:
            return device.rc
        after = Steps(after_commands, env).run()
        sys.stderr.write(after.output)
    if after.rc == 0 and depfile:
        with open(depfile, "w") as handle:
            handle.write(f"{obj}: {source}\n")
    sys.stderr.write(f"kloop nvcc: front ends at once (host {host.seconds:.1f} s, device {device.seconds:.1f} s), "
                     f"then {after.seconds:.1f} s\n")
    return after.rc


def main(argv: list[str]) -> int:
    if os.environ.get("KLOOP_PARALLEL_NVCC", "1") != "0":
        args, depfile = without_depfile(argv)
        try:
            return compile_in_parallel(args, depfile)
        except Unrecognised as reason:
            sys.stderr.write(f"kloop nvcc: plain nvcc ({reason})\n")
    sys.stderr.flush()
    try:
        os.execvp(real_nvcc(), [real_nvcc(), *argv])
    except OSError as error:
        sys.stderr.write(f"kloop nvcc: cannot run {real_nvcc()}: {error}\n")
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
