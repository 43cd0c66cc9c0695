"""The Docker backend: one container per evaluation or agent episode.

The container: no network (``network_mode=none``, loopback only), a read-only root, tmpfs
work dir (``/work``, exec allowed: compiled extensions and Triton/Inductor launchers are
loaded from there) and ``/tmp`` (noexec), all capabilities dropped, ``no-new-privileges``,
Docker's default seccomp profile, the image's non-root user, pids/memory/CPU limits, enough
``/dev/shm`` for NCCL, GPUs passed by explicit device ids, an environment built from an
allow-list (never the host's API keys). Every command runs under an in-container
``timeout -k`` (killing the docker client would not kill it), its output capped; afterwards
whatever it left running is killed, as in the local backend.

The harness's compile and reference cache (``KLOOP_CACHE_DIR=/cache``) is a named volume
shared by sandboxes (or a per-container tmpfs); candidate ranks cannot read it because the
harness confines them with Landlock, which Docker's default seccomp profile lets through
since moby#43199 (checked at start: without Landlock the sandbox refuses to start unless
``require_landlock=False``, and then the cache is a private tmpfs).

No container outlives its owner: PID 1 exits when the client's attached stdin closes (a
client killed with SIGKILL included), containers are removed on exit (``auto_remove``) and
on ``close``, have a maximum lifetime, and carry labels so ``start`` and
``kloop sandbox cleanup`` sweep those whose owner is gone.
"""

from __future__ import annotations

import os
import posixpath
import re
import time
import uuid

import structlog

from kloop_runtime.settings import MULTICAST_OFF
from sandbox.backends import docker_engine as engine
from sandbox.backends.base import MAX_OUTPUT_BYTES, ExecResult, Sandbox, SandboxError
from sandbox.backends.docker_io import ExecStream, SpawnedExec, raw_socket
from sandbox.backends.docker_scripts import KEEPER, LANDLOCK_ABI, READ, SWEEP, WRITE
from sandbox.gpu_pool import GpuLease, GpuPool, device_request, parse_gpu_ids
from sandbox.jail.shared_shm import SWEEP_ENV

log = structlog.get_logger(__name__)

WORKDIR = "/work"
CACHE_DIR = "/cache"
CACHE_VOLUME = "kernel-loop-cache"
HOSTNAME = "kloop-sandbox"
KILL_GRACE_S = 5
CLIENT_SLACK_S = 15.0  # beyond timeout + grace, before the client stops waiting for the stream
FILE_IO_TIMEOUT_S = 120.0
PASSTHROUGH_ENV = ("TORCH_CUDA_ARCH_LIST", "KLOOP_CUDA_ARCH", "KLOOP_REFERENCE_CACHE_MAX_GB", "NCCL_DEBUG",
                   "NCCL_DEBUG_SUBSYS", "NCCL_P2P_LEVEL", "OMP_NUM_THREADS", "TZ")
FIXED_ENV = {
    "HOME": WORKDIR, "TMPDIR": "/tmp", "KLOOP_CACHE_DIR": CACHE_DIR, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
    # `python -m sandbox.harness` runs in /work: the work dir must not shadow the harness's modules.
    "PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1",
    "NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo",
    SWEEP_ENV: "1",  # the container's /dev/shm is its own: the harness sweeps what ended trees left there
    **MULTICAST_OFF,
}
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)


def container_env(marker: str, extra: dict[str, str] | None = None, gpus: tuple[str, ...] = ()) -> dict[str, str]:
    """Fixed variables, a few of the host's (allow-listed), and the caller's minus anything
    named like a credential. Nothing else of the host's environment gets in.

    ``NVIDIA_VISIBLE_DEVICES`` is always set: CUDA images say ``all``, and on a host whose
    default runtime is nvidia that alone would hand every GPU to the container."""
    env = {name: os.environ[name] for name in PASSTHROUGH_ENV if name in os.environ}
    for name, value in (extra or {}).items():
        if SECRET_NAME.search(name):
            log.warning("not passing a credential-like variable into the sandbox", name=name)
            continue
        env[name] = str(value)
    env.update(FIXED_ENV, KLOOP_SANDBOX=marker, NVIDIA_VISIBLE_DEVICES=",".join(gpus) or "void")
    return env


_LANDLOCK: dict[tuple[str, str], int] = {}  # (image id, seccomp profile) -> Landlock ABI inside, per process


class DockerSandbox(Sandbox):
    name = "docker"
    workdir = WORKDIR
    python = "python3"
    isolation = ("container", "network-none", "read-only-root", "cap-drop-all", "no-new-privileges", "non-root",
                 "seccomp-default", "pids-limit", "memory-limit", "env-allowlist")

    def __init__(
        self,
        image: str | None = None,
        gpus: str | list[int | str] | None = None,
        gpu_pool: GpuPool | None = None,
        gpu_count: int = 0,
        lease_timeout_s: float | None = 3600.0,
        memory: str | None = None,
        cpus: float | None = None,
        pids: int = 4096,
        shm_size: str | None = None,
        work_size: str = "16g",
        tmp_size: str = "2g",
        cache_volume: str | None = CACHE_VOLUME,
        require_landlock: bool = True,
        seccomp_profile: str | None = None,
        lifetime_s: float = 12 * 3600,
        env: dict[str, str] | None = None,
    ):
        self.image = image or os.environ.get("KLOOP_SANDBOX_IMAGE") or engine.DEFAULT_IMAGE
        self.gpus = parse_gpu_ids(gpus)
        self.gpu_pool, self.gpu_count, self.lease_timeout_s = gpu_pool, gpu_count, lease_timeout_s
        if gpu_count and gpu_pool is None and not self.gpus:
            self.gpus = tuple(str(i) for i in range(gpu_count))
        self.memory, self.cpus, self.pids, self.shm_size = memory, cpus, pids, shm_size
        self.work_size, self.tmp_size, self.cache_volume = work_size, tmp_size, cache_volume
        self.require_landlock, self.seccomp_profile, self.lifetime_s = require_landlock, seccomp_profile, lifetime_s
        self.extra_env = env or {}
        if seccomp_profile:
            self.isolation = tuple("seccomp-custom" if i == "seccomp-default" else i for i in self.isolation)
        self.marker = f"kloop-{uuid.uuid4().hex[:12]}"
        self.client = self.container = self._lifeline = self._lifeline_handle = None
        self._lease: GpuLease | None = None
        self._oom_kills = 0
        self.device_ids: tuple[str, ...] = ()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self.container is not None:
            return
        self.client = engine.connect()
        engine.sweep_orphans(self.client)
        image = engine.require_image(self.client, self.image)
        self.uid, self.gid = _image_user(image, self.image)
        if self.gpu_pool is not None and self.gpu_count:
            self._lease = self.gpu_pool.lease(self.gpu_count, self.lease_timeout_s)
            self.device_ids = self._lease.device_ids
        else:
            self.device_ids = self.gpus
        key = (image.id, self.seccomp_profile or "")
        first = key not in _LANDLOCK  # first sandbox of this image in this process: probe before sharing the cache
        shared_cache = self.cache_volume if not first and _LANDLOCK[key] else None
        try:
            self._create(shared_cache)
            if first:
                _LANDLOCK[key] = self._probe_landlock()
            if not _LANDLOCK[key]:
                self._refuse_without_landlock()  # raises unless require_landlock=False; the cache stays private
            elif first and self.cache_volume:
                shared_cache = self.cache_volume
                self._remove()
                self._create(shared_cache)
        except BaseException:
            self.close()
            raise
        log.debug("sandbox started", container=self.container.short_id, image=self.image, gpus=",".join(self.device_ids) or None,
                 cache=shared_cache or "tmpfs")

    def _create(self, cache_volume: str | None) -> None:
        import docker

        api = self.client.api
        host_config = api.create_host_config(**self._host_config(cache_volume))
        try:
            created = api.create_container(
                self.image, entrypoint=["python3", "-S", "-c", KEEPER, str(self.lifetime_s)], command=[],
                user=f"{self.uid}:{self.gid}", detach=False, stdin_open=True,  # stdin attached: see the lifeline below
                environment=container_env(self.marker, self.extra_env, self.device_ids), working_dir=WORKDIR,
                labels=engine.labels(self.marker), host_config=host_config, name=self.marker, hostname=HOSTNAME,
                use_config_proxy=False,  # no proxy settings (and their credentials) from ~/.docker/config.json
            )
            self.container = self.client.containers.get(created["Id"])
            # The lifeline: while this process holds it, the container's stdin stays open.
            self._lifeline_handle = api.attach_socket(created["Id"], params={"stdin": 1, "stream": 1})
            self._lifeline = raw_socket(self._lifeline_handle)
            self.container.start()
        except docker.errors.APIError as error:
            raise SandboxError(self._start_failure(error)) from None

    def _host_config(self, cache_volume: str | None) -> dict:
        import docker

        owner = f"uid={self.uid},gid={self.gid}"
        tmpfs = {WORKDIR: f"rw,exec,nosuid,nodev,size={self.work_size},{owner},mode=0700",
                 "/tmp": f"rw,noexec,nosuid,nodev,size={self.tmp_size},mode=1777"}
        mounts = []
        if cache_volume:
            mounts.append(docker.types.Mount(CACHE_DIR, cache_volume, type="volume", labels={engine.LABEL: "cache"}))
        else:
            tmpfs[CACHE_DIR] = f"rw,exec,nosuid,nodev,size={self.work_size},{owner},mode=0700"
        gpus = len(self.device_ids)
        memory = self.memory_limit = self.memory or (f"{16 + 12 * gpus}g" if gpus else "16g")
        # Only lowering: raising a limit past the engine's own (nofile, memlock) fails where it lacks CAP_SYS_RESOURCE.
        ulimits = [docker.types.Ulimit(name="core", soft=0, hard=0)]
        security = ["no-new-privileges"]
        if self.seccomp_profile:
            with open(self.seccomp_profile) as handle:
                security.append(f"seccomp={handle.read()}")
        return dict(
            network_mode="none", read_only=True, cap_drop=["ALL"], security_opt=security, tmpfs=tmpfs, mounts=mounts,
            pids_limit=self.pids, mem_limit=memory, memswap_limit=memory, nano_cpus=int((self.cpus or os.cpu_count() or 1) * 1e9),
            shm_size=self.shm_size or ("8g" if gpus else "1g"), ulimits=ulimits, ipc_mode="private", auto_remove=True,
            # Without a network nothing resolves but /etc/hosts: name the host and loopback's
            # v4-mapped address there (TCPStore looks its clients up; a DNS miss is slow and noisy).
            extra_hosts={HOSTNAME: "127.0.0.1", "localhost": "::ffff:127.0.0.1"},
            device_requests=[device_request(self.device_ids)] if gpus else None,
        )

    def _start_failure(self, error) -> str:
        text = engine._first_line(error)
        if self.device_ids and re.search(r"device driver|nvidia|gpu", text, re.IGNORECASE):
            return (f"the sandbox container could not get GPUs {','.join(self.device_ids)}: {text}. Install the NVIDIA Container "
                    f"Toolkit on the Docker host and restart the engine (nvidia-ctk runtime configure --runtime=docker)")
        return f"the sandbox container (image {self.image}) failed to start: {text}"

    def _probe_landlock(self) -> int:
        out = self._run(["python3", "-S", "-c", LANDLOCK_ABI], 60.0, limit=4096)
        try:
            return int(out.stdout.bytes().strip() or 0)
        except ValueError:
            return 0

    def _refuse_without_landlock(self) -> None:
        if self.require_landlock:
            raise SandboxError(
                "Landlock is not available inside the sandbox container (an old Docker seccomp profile blocks it, or the "
                "host kernel lacks it): candidate code could read the harness's cache. Upgrade Docker (its default profile "
                "allows Landlock since moby#43199), pass a seccomp profile that allows landlock_* syscalls, or accept a "
                "private per-sandbox cache with require_landlock=False")
        log.warning("Landlock unavailable in the sandbox: using a private tmpfs cache", image=self.image)
        self.isolation = self.isolation + ("no-landlock",)

    def close(self) -> None:
        self._remove()
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def _remove(self) -> None:
        if self._lifeline is not None:
            try:
                self._lifeline.close()
            except OSError:
                pass
            self._lifeline = self._lifeline_handle = None
        if self.container is not None:
            try:
                engine.remove_container(self.container)
            except Exception as error:  # noqa: BLE001 - the orphan sweep gets it later
                log.warning("could not remove the sandbox container", container=self.container.short_id, error=str(error))
            self.container = None

    # ------------------------------------------------------------------ commands
    def exec(self, cmd: list[str], timeout_s: float, env: dict[str, str] | None = None, input: bytes | None = None,
             cwd: str | None = None) -> ExecResult:
        """Run ``cmd`` in the work dir (or ``cwd`` inside it); afterwards every process it left in
        the container is killed (as in the local backend: one command at a time per sandbox)."""
        raw = self._run(cmd, timeout_s, env=env, input=input, workdir=_workdir(cwd))
        if raw.returncode in (126, 127) and raw.stderr.bytes().startswith(b"timeout: failed to run command"):
            raise SandboxError(f"cannot start {cmd[0]!r}: {raw.stderr.text().strip()}")
        timed_out = raw.client_timeout or (raw.returncode in (124, 137) and raw.duration_s >= timeout_s)
        stderr = raw.stderr.text() + self._after_command()
        return ExecResult(returncode=raw.returncode, stdout=raw.stdout.text(), stderr=stderr, timed_out=timed_out,
                          duration_s=round(raw.duration_s, 3), truncated=bool(raw.stdout.dropped or raw.stderr.dropped))

    def spawn(self, cmd: list[str], cwd: str | None = None) -> SpawnedExec:
        """A long-lived process in the sandbox (the sandbox's user and environment), with pipe-like
        ends on stdin and stdout (``SpawnedExec``); the caller ends it (``kill_tree``, or its stdin
        closed). A command ``exec`` runs meanwhile ends it with whatever else that command left."""
        exec_id, hijacked = self._exec_start(cmd, True, _workdir(cwd))
        return SpawnedExec(hijacked, lambda: self.client.api.exec_inspect(exec_id), self._after_command, cmd)

    def _exec_start(self, cmd: list[str], stdin: bool, workdir: str, env: dict[str, str] | None = None) -> tuple[str, object]:
        """``cmd`` started in the container as the sandbox's user, in its environment: the exec's id
        and its hijacked socket."""
        import docker

        if self.container is None:
            raise SandboxError("the sandbox is not started")
        api = self.client.api
        try:
            exec_id = api.exec_create(self.container.id, cmd, stdin=stdin, workdir=workdir, user=f"{self.uid}:{self.gid}",
                                      environment=container_env(self.marker, {**self.extra_env, **(env or {})}, self.device_ids))["Id"]
            return exec_id, api.exec_start(exec_id, socket=True)
        except docker.errors.NotFound:
            raise SandboxError("the sandbox container is gone (killed from outside, or its lifetime ran out)") from None
        except docker.errors.APIError as error:
            raise SandboxError(f"cannot run a command in the sandbox: {engine._first_line(error)}") from None

    def _after_command(self) -> str:
        """Kill what the command left running; say so if the memory limit was hit."""
        try:
            out = self._run(["python3", "-S", "-c", SWEEP], 30.0, limit=4096)
            killed, oom = (int(x) for x in out.stdout.bytes().split()[:2])
        except (SandboxError, ValueError):
            return ""
        note = ""
        if oom > self._oom_kills:
            note = (f"\n[kernel-loop sandbox: the memory limit ({self.memory_limit}) was hit; the kernel's OOM killer "
                    f"killed {oom - self._oom_kills} process(es)]\n")
        self._oom_kills = oom
        if killed:
            log.debug("killed leftover processes", count=killed)
        return note

    def _run(self, cmd: list[str], timeout_s: float, env: dict[str, str] | None = None, input: bytes | None = None,
             limit: int = MAX_OUTPUT_BYTES, workdir: str = WORKDIR) -> _Raw:
        """Run ``cmd`` under an in-container ``timeout -k`` (killing the docker client would not
        stop it); the client gives up on the stream only if that somehow fails too."""
        started = time.monotonic()
        wrapped = ["timeout", "-k", str(KILL_GRACE_S), f"{max(timeout_s, 0.1):g}", *cmd]
        exec_id, hijacked = self._exec_start(wrapped, input is not None, workdir, env)
        stream = ExecStream(hijacked, limit, input).start()
        finished = stream.wait(timeout_s + KILL_GRACE_S + CLIENT_SLACK_S)
        if not finished:
            log.warning("command outlived its in-container timeout; aborting the stream", cmd=cmd[:6])
            stream.abort()
        stream.close()
        return _Raw(self._exit_code(exec_id), stream.stdout, stream.stderr, time.monotonic() - started, not finished)

    def _exit_code(self, exec_id: str) -> int:
        import docker

        for _ in range(100):
            try:
                info = self.client.api.exec_inspect(exec_id)
            except docker.errors.APIError:
                return 137  # the container went away under the command
            if not info.get("Running"):
                return info.get("ExitCode") if info.get("ExitCode") is not None else 137
            time.sleep(0.05)
        return 137

    # ------------------------------------------------------------------ files
    def write_file(self, path: str, content: bytes | str) -> None:
        data = content.encode() if isinstance(content, str) else content
        raw = self._run(["python3", "-S", "-c", WRITE, WORKDIR, path], FILE_IO_TIMEOUT_S, input=data, limit=65536)
        if raw.returncode != 0:
            raise SandboxError(_file_error(path, raw, "write"))

    def read_file(self, path: str, max_bytes: int = MAX_OUTPUT_BYTES) -> bytes:
        raw = self._run(["python3", "-S", "-c", READ, WORKDIR, path, str(max_bytes)], FILE_IO_TIMEOUT_S, limit=2 * max_bytes + 2)
        if raw.returncode != 0:
            raise SandboxError(_file_error(path, raw, "read"))
        return raw.stdout.bytes()[:max_bytes]


def _workdir(cwd: str | None) -> str:
    """The work dir, or ``cwd`` inside it; SandboxError for a ``cwd`` outside it."""
    workdir = posixpath.normpath(posixpath.join(WORKDIR, cwd)) if cwd else WORKDIR
    if not (workdir == WORKDIR or workdir.startswith(WORKDIR + "/")):
        raise SandboxError(f"{cwd!r} is outside the sandbox work dir")
    return workdir


class _Raw:
    def __init__(self, returncode, stdout, stderr, duration_s, client_timeout):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.duration_s, self.client_timeout = duration_s, client_timeout


def _file_error(path: str, raw: _Raw, verb: str) -> str:
    if raw.returncode == 3:
        return f"{path!r} is outside the sandbox work dir"
    if raw.returncode == 4:
        return f"{path} does not exist in the sandbox"
    return f"cannot {verb} {path} in the sandbox: {raw.stderr.text().strip() or f'exit code {raw.returncode}'}"


def _image_user(image, name: str) -> tuple[int, int]:
    user = (image.attrs.get("Config") or {}).get("User") or ""
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or uid == "0":
        raise SandboxError(f"the image {name} runs as {user or 'root'!r}, not a numeric non-root user: build it from docker/Dockerfile")
    return int(uid), int(gid) if gid.isdigit() else int(uid)
