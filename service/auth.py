"""API tokens: a random secret shown once, only its SHA-256 kept; each with its limits.

``kloop serve token create NAME`` prints ``kl_<secret>``; a client sends it as
``Authorization: Bearer kl_...`` (the web page keeps it in an HttpOnly cookie). A job belongs to
the token that submitted it: other tokens get 404 for it and do not see it listed, except a token
made with ``--admin`` (the operator's), which sees every job.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import sqlite3
from dataclasses import dataclass

from service.store import Store, TokenRecord

PREFIX = "kl_"
NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
COOKIE = "kloop_token"


@dataclass(frozen=True)
class Limits:
    """Per-token limits: jobs running at once (more wait in the queue), jobs queued (more are
    refused with 429), and the size of one request body (larger ones get 413 before being read)."""

    max_running: int = 4
    max_queued: int = 1000
    max_body_bytes: int = 2 * 2**20


class TokenError(ValueError):
    """A token that cannot be created (bad or taken name)."""


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(store: Store, name: str, limits: Limits = Limits(), admin: bool = False) -> str:
    """A new token for ``name`` (``admin``: it sees every token's jobs): returns the secret (never stored, shown once)."""
    if not NAME.match(name):
        raise TokenError(f"token name {name!r}: use 1-64 letters, digits, '_', '.', '@' or '-'")
    if min(limits.max_running, limits.max_queued, limits.max_body_bytes) < 1:
        raise TokenError("token limits must be positive")
    secret = PREFIX + secrets.token_urlsafe(32)
    try:
        store.add_token(name, digest(secret), limits.max_running, limits.max_queued, limits.max_body_bytes, admin)
    except sqlite3.IntegrityError:
        raise TokenError(f"a token named {name!r} exists already; revoke it first (`kloop serve token revoke {name}`)") from None
    return secret


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header, or None."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def lookup(store: Store, secret: str | None) -> TokenRecord | None:
    if not secret or not secret.startswith(PREFIX) or len(secret) > 200:
        return None
    return store.token_by_hash(digest(secret))
