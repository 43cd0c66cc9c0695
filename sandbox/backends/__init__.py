"""Sandbox backends: ``local`` (a subprocess) and ``docker`` (a container)."""

from sandbox.backends.base import ExecResult, Sandbox, SandboxError
from sandbox.backends.local import LocalSandbox

BACKENDS = ("local", "docker")


def open_sandbox(name: str, **options) -> Sandbox:
    """A new, not yet started, sandbox of the named backend."""
    if name == "local":
        return LocalSandbox(**options)
    if name == "docker":
        from sandbox.backends.docker import DockerSandbox

        return DockerSandbox(**options)
    raise SandboxError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "ExecResult", "LocalSandbox", "Sandbox", "SandboxError", "open_sandbox"]
