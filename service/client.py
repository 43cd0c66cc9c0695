"""A client of ``kloop serve``: submit a job, follow its events, read its result.

Used by ``kloop eval|run|batch ... --server URL`` (the token from ``$KLOOP_TOKEN``); needs only httpx,
not the service's extra. Errors a user can act on (a bad token, a refused request, an unreachable
server) are ``UserError`` with the server's own message.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from agent.errors import UserError

TOKEN_ENV = "KLOOP_TOKEN"
RECONNECT_S = 1.0  # the wait after a failed connection, times the failures in a row
RECONNECT_MAX_S = 2.0
MAX_RECONNECTS = 30


class ServiceClient:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = 60.0):
        token = token or os.environ.get(TOKEN_ENV)
        if not token:
            raise UserError(f"--server needs an API token in ${TOKEN_ENV} (the server's operator makes one with "
                            f"`kloop serve token create NAME`)")
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._send(method, path, **kwargs).json()

    def _send(self, method: str, path: str, absent_ok: bool = False, **kwargs: Any) -> httpx.Response | None:
        """The server's answer; with ``absent_ok``, None where it answers 404."""
        attempts = 1 if method == "POST" else 3  # reads and cancels are safe to send again (POSTs carry an Idempotency-Key)
        for attempt in range(attempts):
            try:
                response = self.http.request(method, path, **kwargs)
                break
            except httpx.TransportError as error:
                if attempt == attempts - 1:
                    raise UserError(f"cannot reach the server at {self.url}: {error}") from None
                time.sleep(0.5 * (attempt + 1))
        if absent_ok and response.status_code == 404:
            return None
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text[:300]
            raise UserError(f"the server answered {response.status_code}: {detail}")
        return response

    def submit(self, kind: str, body: dict[str, Any]) -> str:
        """POST /v1/{evals,runs,batches}; the job's id. A retried submission (same Idempotency-Key) makes no second job."""
        key = uuid.uuid4().hex
        for attempt in range(3):
            try:
                return self._call("POST", f"/v1/{kind}", json=body, headers={"Idempotency-Key": key})["id"]
            except UserError as error:
                if "cannot reach" not in str(error) or attempt == 2:
                    raise
                time.sleep(1 + attempt)
        raise AssertionError("unreachable")

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{job_id}")

    def job_if_given(self, job_id: str) -> dict[str, Any] | None:
        """The job, None where the server does not give it to this token (absent, or another token's)."""
        response = self._send("GET", f"/v1/jobs/{job_id}", absent_ok=True)
        return None if response is None else response.json()

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/jobs/{job_id}")

    def batch_results(self, job_id: str) -> list[dict[str, Any]]:
        """The batch's finished episodes (its results.jsonl records)."""
        return self._call("GET", f"/v1/batches/{job_id}/results")

    def episode_trajectory(self, job_id: str, run_dir: str) -> str | None:
        """A batch episode's trajectory (JSON text), ``run_dir`` being its ``runs/EPISODE/TRY``; None when it has none."""
        response = self._send("GET", f"/v1/batches/{job_id}/{run_dir}/trajectory", absent_ok=True)
        return None if response is None else response.text

    def episode_best(self, job_id: str, run_dir: str) -> str | None:
        """A batch episode's best solution; None when it has none."""
        response = self._send("GET", f"/v1/batches/{job_id}/{run_dir}/best", absent_ok=True)
        return None if response is None else response.text

    def events(self, job_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, data) of each event of the job, from its first, until ``end``. A connection that ends
        after delivering events is resumed at once with Last-Event-ID (a proxy may cut a long job's
        stream); one that drops, or ends having delivered none, is a failure: the client waits longer
        after each (up to RECONNECT_MAX_S) and gives up after MAX_RECONNECTS in a row."""
        last, failures = None, 0
        while True:
            headers = {"Last-Event-ID": str(last)} if last is not None else {}
            try:
                with self.http.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers, timeout=httpx.Timeout(60.0, read=None)) as stream:
                    if stream.status_code >= 400:
                        stream.read()
                        raise UserError(f"the server answered {stream.status_code}: {stream.text[:300]}")
                    delivered = False
                    for event_id, type_, data in parse_sse(stream.iter_lines()):
                        failures, delivered = 0, True
                        if event_id is not None:
                            last = event_id
                        yield type_, data
                        if type_ == "end":
                            return
                if delivered:
                    continue
                problem = f"the server at {self.url} kept ending the event stream of job {job_id} without finishing the job"
            except httpx.HTTPError as error:
                problem = f"lost the server at {self.url}: {error}"
            failures += 1
            if failures > MAX_RECONNECTS:
                raise UserError(problem) from None
            time.sleep(min(RECONNECT_S * failures, RECONNECT_MAX_S))

    def follow(self, job_id: str, on_event: Callable[[str, dict[str, Any]], None] = lambda t, d: None) -> dict[str, Any]:
        """Follow the job to its end; the job (status and result) as it ended."""
        for type_, data in self.events(job_id):
            on_event(type_, data)
        return self.job(job_id)


def parse_sse(lines: Iterator[str]) -> Iterator[tuple[int | None, str, dict[str, Any]]]:
    """(id, event, data) of each server-sent event in ``lines``."""
    event_id, type_, data = None, "message", []
    for line in lines:
        if not line:
            if data:
                try:
                    payload = json.loads("\n".join(data))
                except ValueError:
                    payload = {"text": "\n".join(data)}
                yield event_id, type_, payload
            event_id, type_, data = None, "message", []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                event_id = int(value) if value.isdigit() else None
            elif name == "event":
                type_ = value
            elif name == "data":
                data.append(value)
