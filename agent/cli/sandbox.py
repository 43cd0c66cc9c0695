"""``kloop sandbox``: build the Docker sandbox image, sweep leftover containers."""

from __future__ import annotations

from typing import Annotated

import typer

from agent.cli.common import console, sandbox_errors
from agent.errors import UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="The Docker sandbox: build its image, clean up containers.")


@app.command("build")
def build_command(
    base: Annotated[str | None, typer.Option(help="base image (default: the Dockerfile's CUDA devel image); "
                                                     "a local image is used as it is")] = None,
    tag: Annotated[str, typer.Option(help="tag of the image built")] = "kernel-loop-sandbox:latest",
    build_arg: Annotated[list[str], typer.Option("--build-arg", help="NAME=VALUE passed to docker/Dockerfile (e.g. TORCH_REQUIREMENT=...)")] = [],
    network: Annotated[str | None, typer.Option(help="network of the build containers ('none' for an offline build from a full base)")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print only the image id")] = False,
) -> None:
    """Build docker/Dockerfile: the harness over PyTorch and CUDA, non-root, no LLM SDKs."""
    from sandbox.backends.docker_image import build_image

    args = {}
    for item in build_arg:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UserError(f"--build-arg {item!r}: expected NAME=VALUE")
        args[name] = value
    with sandbox_errors():
        image_id = build_image(tag=tag, base=base, build_args=args, network=network,
                               on_line=None if quiet else lambda line: console.print(line, markup=False, highlight=False))
    console.print(image_id if quiet else f"built {tag} ({image_id[:19]})", markup=False, highlight=False)


@app.command("cleanup")
def cleanup_command(
    everything: Annotated[bool, typer.Option("--all", help="remove every sandbox container, not only those whose owner is gone")] = False,
) -> None:
    """Remove sandbox containers left behind by processes that died."""
    from sandbox.backends.docker_engine import cleanup, connect

    with sandbox_errors():
        removed = cleanup(connect(), everything=everything)
    console.print(f"removed {len(removed)} sandbox container(s)" + (f": {', '.join(removed)}" if removed else ""), markup=False)
