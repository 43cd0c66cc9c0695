"""Building the sandbox image (docker/Dockerfile) through the docker SDK, progress streamed."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import structlog

from sandbox.backends import docker_engine as engine
from sandbox.backends.base import SandboxError

log = structlog.get_logger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = "docker/Dockerfile"
SOURCE_LABEL = "kernel-loop.source"
SOURCES = ("kloop_runtime", "sandbox", "problems", "docker/Dockerfile", "docker/provision.sh", "docker/requirements-harness.txt")


def source_digest(root: Path = REPO_ROOT) -> str:
    """What the image's harness was built from: the digest ``sha256sum`` gives over the sorted
    list of ``sha256sum`` lines of SOURCES (docker/build_test_image.sh computes the same)."""
    files = []
    for name in SOURCES:
        path = root / name
        found = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        files += [p.relative_to(root).as_posix() for p in found if p.suffix != ".pyc" and "__pycache__" not in p.parts]
    lines = "".join(f"{hashlib.sha256((root / f).read_bytes()).hexdigest()}  {f}\n" for f in sorted(files, key=str.encode))
    return hashlib.sha256(lines.encode()).hexdigest()[:16]


def build_image(tag: str = engine.DEFAULT_IMAGE, base: str | None = None, build_args: dict[str, str] | None = None,
                network: str | None = None, on_line: Callable[[str], None] | None = None, context: Path = REPO_ROOT) -> str:
    """Build docker/Dockerfile (classic builder; the context honours .dockerignore) as ``tag``;
    ``base`` replaces the CUDA base image (a locally built one is used as it is, never pulled).
    Returns the image id. ``on_line`` receives each line of build output as it comes."""
    if not (context / DOCKERFILE).is_file():
        raise SandboxError(f"{context / DOCKERFILE} is missing: build from a kernel-loop checkout")
    client = engine.connect(timeout_s=3600)
    args = dict(build_args or {})
    if base:
        args["BASE_IMAGE"] = base
    log.info("building the sandbox image", tag=tag, base=base or "(Dockerfile default)")
    image_id = None
    try:
        for chunk in client.api.build(path=str(context), dockerfile=DOCKERFILE, tag=tag, buildargs=args, rm=True,
                                      forcerm=True, decode=True, network_mode=network,
                                      labels={"kernel-loop.image": "sandbox", SOURCE_LABEL: source_digest(context)}):
            if "error" in chunk:
                detail = ((chunk.get("errorDetail") or {}).get("message") or chunk["error"]).strip()
                if re.search(r"registry|pull access|manifest|lookup .* no such host", detail):
                    detail += (f"; the base image ({base or 'the Dockerfile default'}) is neither local nor pullable: "
                               f"`docker pull`/`docker load` it first, or pass --base with a local image")
                raise SandboxError(f"building {tag} failed: {detail}")
            line = chunk.get("stream") or _status_line(chunk)
            if line and on_line:
                on_line(line.rstrip("\n"))
            if "aux" in chunk and isinstance(chunk["aux"], dict):
                image_id = chunk["aux"].get("ID", image_id)
    except SandboxError:
        raise
    except Exception as error:  # noqa: BLE001 - the SDK raises several kinds; one message for all
        raise SandboxError(f"building {tag} failed: {engine._first_line(error)}") from None
    image_id = image_id or client.images.get(tag).id
    log.info("built the sandbox image", tag=tag, id=image_id)
    return image_id


def _status_line(chunk: dict) -> str:
    status = chunk.get("status")
    if not status:
        return ""
    return f"{chunk.get('id', '')}: {status} {chunk.get('progress', '')}".strip(": ")
