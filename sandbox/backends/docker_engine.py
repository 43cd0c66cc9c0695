"""Talking to the Docker engine: connecting (with one clear message when it is missing), the
labels every sandbox container carries, and sweeping containers whose owner is gone."""

from __future__ import annotations

import os

import structlog

from sandbox.backends.base import SandboxError
from sandbox.backends.owner import owner, owner_alive

log = structlog.get_logger(__name__)

LABEL = "kernel-loop.sandbox"
OWNER_LABEL = "kernel-loop.owner"
DEFAULT_IMAGE = "kernel-loop-sandbox:latest"
TEST_IMAGE = "kernel-loop-sandbox:cpu-test"
ENGINE_MISSING = ("no Docker engine answers{where}: start one (`sudo systemctl start docker`, or `sudo dockerd &`; "
                  "on a CI runner docker/ci_setup.sh), or use --sandbox local")


def connect(timeout_s: float = 60.0):
    """A docker SDK client for the engine of ``DOCKER_HOST`` (default: the local socket)."""
    try:
        import docker
    except ImportError:
        raise SandboxError("the docker SDK is not installed: pip install 'docker>=7.1'") from None
    where = f" at {os.environ['DOCKER_HOST']}" if os.environ.get("DOCKER_HOST") else ""
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except docker.errors.DockerException as error:
        raise SandboxError(ENGINE_MISSING.format(where=where) + f" ({_first_line(error)})") from None
    return client


def require_image(client, image: str):
    """The local image ``image``; never pulled (sandbox hosts need not reach a registry)."""
    import docker

    try:
        return client.images.get(image)
    except docker.errors.ImageNotFound:
        hint = "docker/build_test_image.sh (the CPU test image)" if "cpu-test" in image else "`kloop sandbox build`"
        raise SandboxError(f"the sandbox image {image} is not on this Docker engine: build it with {hint}") from None
    except docker.errors.APIError as error:
        raise SandboxError(f"cannot inspect the sandbox image {image}: {_first_line(error)}") from None


def labels(marker: str) -> dict[str, str]:
    return {LABEL: marker, OWNER_LABEL: owner()}


def sandbox_containers(client):
    return client.containers.list(all=True, filters={"label": LABEL})


def remove_container(container) -> bool:
    import docker

    try:
        container.remove(force=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as error:
        if error.status_code == 409:  # removal already in progress (auto_remove)
            return False
        raise


def sweep_orphans(client) -> int:
    """Remove sandbox containers of this host whose owning process has died."""
    removed = 0
    for container in sandbox_containers(client):
        if not owner_alive(container.labels.get(OWNER_LABEL, "")):
            log.warning("removing orphaned sandbox container", container=container.short_id, owner=container.labels.get(OWNER_LABEL))
            removed += remove_container(container)
    return removed


def cleanup(client, everything: bool = False) -> list[str]:
    """Remove orphaned sandbox containers (``everything``: all sandbox containers); returns their names."""
    names = []
    for container in sandbox_containers(client):
        if everything or not owner_alive(container.labels.get(OWNER_LABEL, "")):
            if remove_container(container):
                names.append(container.name)
    return names


def _first_line(error: Exception) -> str:
    text = str(getattr(error, "explanation", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__
