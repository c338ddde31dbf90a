"""The console's settings (``ALC_CONSOLE_*``), built once in ``__main__``."""

from __future__ import annotations

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.settings import Settings

# Prepare's own bound (ALC_MAX_REQUEST_BYTES' default): one number for both HTTP servers.
PREPARE_MAX_REQUEST_BYTES: int = Settings.model_fields["max_request_bytes"].default


class ConsoleSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ALC_CONSOLE_", frozen=True)

    host: str = "127.0.0.1"
    port: int = 18090
    # Prepare's base URL: releases, sessions and read-back go through its API.
    prepare_url: str = "http://127.0.0.1:18080"
    # Read-only queries Prepare has no route for (storage/inspection.py), and the
    # console's sessions (migration 023).
    pg_dsn: str = "postgresql://agentloom@127.0.0.1:55432/agentloom"
    # Secure (and the __Host- prefix) on the cookies: set when served over HTTPS.
    secure_cookie: bool = False
    # A session ends after this long without a request, and this long after sign-in.
    session_idle_s: float = 30 * 60
    session_max_s: float = 12 * 3600
    # Signs the sign-in form's pre-session token. Unset: a random one per process, so a
    # sign-in form is only good on the instance that served it; several instances behind
    # one name share one secret.
    secret: SecretStr | None = None
    # Origins (scheme://host[:port]) a state-changing request may come from. Empty: the
    # console's own, as the request names it; behind a TLS proxy name the public one.
    allowed_origins: tuple[str, ...] = ()
    # 413 past this (Prepare's bound and its BodyLimit middleware).
    max_request_bytes: int = PREPARE_MAX_REQUEST_BYTES
    # A connection must deliver a whole request (line, headers, body) within this, and
    # is closed after this long idle between requests.
    request_timeout_s: float = 10.0
    keep_alive_s: float = 5.0
    # Bytes of request line + headers h11 buffers before it answers 400.
    max_header_bytes: int = 16 * 1024
    # Connections + requests in flight past which uvicorn answers 503.
    max_connections: int = 256
