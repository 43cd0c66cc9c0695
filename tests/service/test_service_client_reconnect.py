"""ServiceClient.events against a real HTTP server on loopback (http.server, no service extra): a
server that keeps ending the event stream with no event (a proxy that cuts it, an empty 200) makes
the client wait longer before each reconnect and give up with a UserError, not spin; a stream that
delivered an event and was cut is resumed at once, with Last-Event-ID."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import service.client as client
from agent.errors import UserError
from service.client import ServiceClient

RUNAWAY = 50  # requests after which the server refuses (503): a client that spins ends there, not never


@contextmanager
def sse_server(body_for: Callable[[int, str | None], bytes]) -> Iterator[tuple[str, list[tuple[float, str | None]]]]:
    """A server whose events URL answers its Nth request (from 0; with its Last-Event-ID) with 200
    text/event-stream, ``body_for(N, last_event_id)`` and the stream's end; its URL and the requests
    it got, as (arrival time, Last-Event-ID)."""
    requests: list[tuple[float, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # a chunked stream that ends as uvicorn's does, the connection kept
        disable_nagle_algorithm = True  # as uvicorn: else each small write waits ~40 ms on a delayed ACK

        def do_GET(self) -> None:
            requests.append((time.monotonic(), self.headers.get("Last-Event-ID")))
            if len(requests) > RUNAWAY:
                self.send_error(503, "too many reconnects")
                return
            body = body_for(len(requests) - 1, self.headers.get("Last-Event-ID"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if body:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.parametrize("body", [b"", b": stream of job j1\n\n"], ids=["empty", "comment-only"])
def test_a_stream_that_keeps_ending_with_no_event_backs_off_and_gives_up(monkeypatch, body):
    monkeypatch.setattr(client, "RECONNECT_S", 0.1)
    monkeypatch.setattr(client, "MAX_RECONNECTS", 4)
    pauses = [min(0.1 * failure, client.RECONNECT_MAX_S) for failure in range(1, 5)]  # 0.1 .. 0.4 s, 1 s in all
    with sse_server(lambda n, last: body) as (url, requests), ServiceClient(url, token="t") as service:
        started = time.monotonic()
        with pytest.raises(UserError) as caught:
            list(service.events("j1"))
        elapsed = time.monotonic() - started
    gaps = [later[0] - earlier[0] for earlier, later in zip(requests, requests[1:])]
    # it waited before each reconnect, longer each time (the old loop reconnected at once, ~1 ms apart)
    assert all(gap >= pause - 0.005 for gap, pause in zip(gaps, pauses)), (gaps, pauses, len(requests))
    assert elapsed >= sum(pauses) - 0.01, (elapsed, len(requests))
    assert len(requests) == 5, requests
    assert str(caught.value) == f"the server at {url} kept ending the event stream of job j1 without finishing the job"
    assert all(last is None for _, last in requests)  # no event, so nothing to resume from


def test_a_stream_cut_after_an_event_resumes_at_once_with_last_event_id(monkeypatch):
    """The honest control: a cut that delivered an event is no failure and costs no pause."""
    monkeypatch.setattr(client, "RECONNECT_S", 5.0)
    monkeypatch.setattr(client, "MAX_RECONNECTS", 1)

    def body_for(n: int, last: str | None) -> bytes:
        if n == 0:
            return b': stream of job j1\n\nid: 7\nevent: step\ndata: {"step": 1}\n\n'  # then the stream ends, no `end`
        return b'event: end\ndata: {"status": "done", "error": null}\n\n' if last == "7" else b""

    with sse_server(body_for) as (url, requests), ServiceClient(url, token="t") as service:
        started = time.monotonic()
        seen = list(service.events("j1"))
        elapsed = time.monotonic() - started
    assert seen == [("step", {"step": 1}), ("end", {"status": "done", "error": None})]
    assert [last for _, last in requests] == [None, "7"]
    assert elapsed < 2.5, elapsed  # no RECONNECT_S (5 s) wait between the two
