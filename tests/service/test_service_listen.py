"""The server's socket: accepted connections have Nagle's algorithm off, so a response written in two
pieces (head, then body: every response through an HTTP middleware) is not held back until the
client's delayed ACK (44 ms per request on a kept-alive connection with ``socket.create_server``'s
socket, whose protocol number is 0 and which asyncio therefore does not take for TCP)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from service.server import listen


async def _nodelay_of_an_accepted_connection(listening: socket.socket) -> int:
    seen: asyncio.Future = asyncio.get_running_loop().create_future()

    async def accepted(reader, writer):
        seen.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accepted, sock=listening)
    async with server:
        _, writer = await asyncio.open_connection(*listening.getsockname()[:2])
        value = await asyncio.wait_for(seen, 10)
        writer.close()
    return value


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_connections_to_the_server_send_small_writes_at_once(host):
    try:
        listening = listen(host, 0)
    except OSError as error:  # a host without IPv6 loopback
        pytest.skip(f"cannot listen on {host}: {error}")
    assert listening.proto == socket.IPPROTO_TCP
    assert asyncio.run(_nodelay_of_an_accepted_connection(listening)) != 0


def test_the_control_socket_from_create_server_would_have_kept_nagle_on():
    """The control: the socket ``listen`` replaces is the one asyncio leaves alone."""
    assert asyncio.run(_nodelay_of_an_accepted_connection(socket.create_server(("127.0.0.1", 0)))) == 0


def test_a_port_in_use_is_an_os_error_before_anything_starts():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        with pytest.raises(OSError):
            listen("127.0.0.1", taken.getsockname()[1])
