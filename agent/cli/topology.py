"""``kloop topology``: this host's GPUs, links and measured bandwidths."""

from __future__ import annotations

from typing import Annotated

import typer

from agent.cli.common import console, errors


def command(
    refresh: Annotated[bool, typer.Option("--refresh", help="measure again even if this host is cached")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the measurement as JSON")] = False,
) -> None:
    """This host's GPUs, links and measured copy bandwidths (measured once in a subprocess, then cached)."""
    from sandbox.topology_measure import TopologyUnavailable, cache_path, measure_host

    try:
        if as_json:
            measurement, _ = measure_host(refresh=refresh)
        else:
            with console.status("measuring GPUs and links (a subprocess; tens of seconds)...", spinner="dots"):
                measurement, fresh = measure_host(refresh=refresh)
    except TopologyUnavailable as error:
        errors.print(f"[bold]no measured topology:[/] {error}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if as_json:
        print(measurement.model_dump_json(indent=2))
        return
    from agent.render import print_topology
    from kloop_runtime.settings import cache_root

    print_topology(measurement, console)
    where = cache_path(cache_root(), measurement.key)
    console.print(f"{'measured now' if fresh else 'from the cache'}: {where} (--refresh measures again)", highlight=False)
