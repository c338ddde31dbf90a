"""The console's settings (``ALC_CONSOLE_*``), built once in ``__main__``."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class ConsoleSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ALC_CONSOLE_", frozen=True)

    host: str = "127.0.0.1"
    port: int = 18090
    # Prepare's base URL: releases, sessions and read-back go through its API.
    prepare_url: str = "http://127.0.0.1:18080"
    # Read-only queries Prepare has no route for (storage/inspection.py).
    pg_dsn: str = "postgresql://agentloom@127.0.0.1:55432/agentloom"
    # Set on the cookie when served over HTTPS.
    secure_cookie: bool = False
