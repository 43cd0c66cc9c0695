"""``kloop sandbox``: build the Docker sandbox image, sweep leftover containers; and the
options ``kloop eval`` hands to a sandbox backend."""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console

from agent.errors import UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="The Docker sandbox: build its image, clean up containers.")
console = Console()


def sandbox_options(backend: str, device: str, world: int, gpus: Optional[str], image: Optional[str]) -> dict:
    """Keyword arguments for ``open_sandbox(backend, ...)`` from ``kloop eval``'s options.
    ``gpus`` limits which GPUs may be used; an evaluation takes ``world`` of them in cuda mode
    and one in emulate mode."""
    from sandbox.gpu_pool import GpuPool, GpuPoolError, parse_gpu_ids

    try:
        ids = parse_gpu_ids(gpus)
    except GpuPoolError as error:
        raise UserError(str(error)) from None
    needed = 0 if device == "cpu" else world if device == "cuda" else 1
    if ids and needed > len(ids):
        raise UserError(f"--device {device} --world {world} needs {needed} GPUs; --gpus {gpus} gives {len(ids)}")
    if backend == "local":
        if image:
            raise UserError("--image applies to --sandbox docker only")
        return {"env": {"CUDA_VISIBLE_DEVICES": ",".join(ids)}} if ids else {}
    if backend != "docker":
        return {}
    options: dict = {"image": image} if image else {}
    if needed:
        options.update(gpu_pool=GpuPool(ids), gpu_count=needed) if ids else options.update(gpu_count=needed)
    return options


@app.command("build")
def build_command(
    base: Optional[str] = typer.Option(None, help="base image (default: the Dockerfile's CUDA devel image); "
                                                  "a local image is used as it is"),
    tag: str = typer.Option("kernel-loop-sandbox:latest", help="tag of the image built"),
    build_arg: list[str] = typer.Option([], "--build-arg", help="NAME=VALUE passed to docker/Dockerfile (e.g. TORCH_REQUIREMENT=...)"),
    network: Optional[str] = typer.Option(None, help="network of the build containers ('none' for an offline build from a full base)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="print only the image id"),
) -> None:
    """Build docker/Dockerfile: the harness over PyTorch and CUDA, non-root, no LLM SDKs."""
    from sandbox.backends import SandboxError
    from sandbox.backends.docker_image import build_image

    args = {}
    for item in build_arg:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UserError(f"--build-arg {item!r}: expected NAME=VALUE")
        args[name] = value
    try:
        image_id = build_image(tag=tag, base=base, build_args=args, network=network,
                               on_line=None if quiet else lambda line: console.print(line, markup=False, highlight=False))
    except SandboxError as error:
        raise UserError(str(error)) from None
    console.print(image_id if quiet else f"built {tag} ({image_id[:19]})", markup=False, highlight=False)


@app.command("cleanup")
def cleanup_command(
    everything: bool = typer.Option(False, "--all", help="remove every sandbox container, not only those whose owner is gone"),
) -> None:
    """Remove sandbox containers left behind by processes that died."""
    from sandbox.backends import SandboxError
    from sandbox.backends.docker_engine import cleanup, connect

    try:
        removed = cleanup(connect(), everything=everything)
    except SandboxError as error:
        raise UserError(str(error)) from None
    console.print(f"removed {len(removed)} sandbox container(s)" + (f": {', '.join(removed)}" if removed else ""), markup=False)
