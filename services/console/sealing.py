"""Secrets of a console session, derived from its opaque id (pure: stdlib only, no I/O).

The id (32 random bytes, only ever in the browser's HttpOnly cookie) is the root of
everything the server keeps about the session:

- the row's primary key is ``sha256(id)``, so the table names no live cookie;
- the user's API key is sealed under keys derived from the id (HMAC-SHA256 as a PRF in
  counter mode, then encrypt-then-MAC): a copy of the table is no credential. Each
  derived key seals exactly one value, so no nonce is needed;
- the CSRF synchroniser token is ``HMAC(id, "csrf")``: bound to the session, useless
  without it, and nothing to store.

The sign-in form has no session yet: its token is ``HMAC(secret, pre-session id)``
with the console's secret, the pre-session id in its own cookie (signed double submit).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

ID_BYTES = 32
_ID_CHARS = 43  # base64 of 32 bytes, unpadded
_URLSAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_TAG = 32


def new_id() -> str:
    return secrets.token_urlsafe(ID_BYTES)


def is_id(value: str) -> bool:
    """Whether ``value`` has the shape of an id ``new_id`` draws (urlsafe base64)."""
    return len(value) == _ID_CHARS and all(ch in _URLSAFE for ch in value)


def _derive(session_id: str, purpose: bytes) -> bytes:
    return hmac.new(session_id.encode(), purpose, hashlib.sha256).digest()


def id_hash(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()


def csrf_token(session_id: str) -> str:
    return _derive(session_id, b"csrf").hex()


def _stream(key: bytes, n: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hmac.new(key, counter.to_bytes(8, "big"), hashlib.sha256).digest()
        counter += 1
    return bytes(out[:n])


def _xor(session_id: str, data: bytes) -> bytes:
    stream = _stream(_derive(session_id, b"enc"), len(data))
    return bytes(a ^ b for a, b in zip(data, stream, strict=True))


def seal(session_id: str, secret: str) -> bytes:
    body = _xor(session_id, secret.encode())
    tag = hmac.new(_derive(session_id, b"mac"), body, hashlib.sha256).digest()
    return body + tag


def unseal(session_id: str, sealed: bytes) -> str | None:
    """The sealed value, or None when ``sealed`` was not sealed under this id."""
    body, tag = sealed[:-_TAG], sealed[-_TAG:]
    want = hmac.new(_derive(session_id, b"mac"), body, hashlib.sha256).digest()
    if len(sealed) < _TAG or not hmac.compare_digest(tag, want):
        return None
    plain = _xor(session_id, body)
    try:
        return plain.decode()
    except UnicodeDecodeError:
        return None


def login_token(server_secret: bytes, pre_id: str) -> str:
    return hmac.new(server_secret, b"login:" + pre_id.encode(), hashlib.sha256).hexdigest()


def same(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a token the client sent with the expected one."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
