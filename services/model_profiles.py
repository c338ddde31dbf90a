"""A model profile as this deployment accepts it (R6.1, R6.5): from a release (publish,
and a stored row at load) and from the deployment's catalog (``ALC_MODEL_PROFILES_FILE``,
``ALC_MODEL_LIMITS``), read the same way by every service that prices or budgets a call."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from domain.context.formats.table import FORMAT_TABLE
from domain.window.budget import ModelProfile, counting_label
from domain.window.model_catalog import ModelCatalog
from schemas.errors import InvalidPolicy


def model_profile(
    raw: Mapping[str, Any], counting_method: str | None, at: str = "model_profile"
) -> ModelProfile:
    """R6.1/R6.5 and what a model call needs of a profile: a provider format this
    deployment renders, a cache lifetime that format offers, and (given
    ``counting_method``) a counting method it counts with (R6.4). Refusals name the
    field's JSON path (``details.json_path``)."""
    try:
        profile = ModelProfile.from_dict(raw)
        if counting_method is not None:
            counting_label(profile.counting, counting_method)
    except InvalidPolicy as exc:
        field = exc.details.get("field") or (exc.details.get("fields") or [None])[0]
        exc.details.setdefault("json_path", f"{at}.{field}" if field else at)
        raise
    if profile.provider_format not in FORMAT_TABLE:
        raise InvalidPolicy(
            f"{at}.provider_format must be one of {list(FORMAT_TABLE)}",
            field="provider_format",
            path=f"{at}.provider_format",
            json_path=f"{at}.provider_format",
            rule="not_an_option",
            value=profile.provider_format,
            options=list(FORMAT_TABLE),
        )
    offered = FORMAT_TABLE[profile.provider_format].cache_ttls
    if profile.cache_ttl not in offered:
        raise InvalidPolicy(
            f"{at}.cache_ttl must be one of {list(offered)} for {profile.provider_format}",
            field="cache_ttl",
            path=f"{at}.cache_ttl",
            json_path=f"{at}.cache_ttl",
            rule="not_an_option",
            value=profile.cache_ttl,
            options=list(offered),
        )
    return profile


def load_catalog(
    profiles_file: str | None, limits: str, counting_method: str | None
) -> ModelCatalog:
    """The deployment's model catalog from its settings (``ALC_MODEL_PROFILES_FILE``,
    ``ALC_MODEL_LIMITS``); a malformed entry stops the process at start, naming it."""
    named: dict[str, ModelProfile] = {}
    if profiles_file:
        try:
            raw = json.loads(Path(profiles_file).read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise SystemExit(f"ALC_MODEL_PROFILES_FILE {profiles_file}: {exc}") from exc
        if not isinstance(raw, dict):
            raise SystemExit(f"ALC_MODEL_PROFILES_FILE {profiles_file}: not a JSON object")
        for name, spec in raw.items():
            try:
                named[name] = model_profile(spec, counting_method, at=f"model_profiles.{name}")
            except InvalidPolicy as exc:
                raise SystemExit(f"ALC_MODEL_PROFILES_FILE {name}: {exc.message}") from exc
    caps: dict[str, int] = {}
    for entry in filter(None, (e.strip() for e in limits.split(","))):
        name, _, tokens = entry.partition("=")
        if not (name.strip() and tokens.strip().isdigit() and int(tokens) > 0):
            raise SystemExit(f"ALC_MODEL_LIMITS entry {entry!r} is not name=positive tokens")
        caps[name.strip()] = int(tokens)
    return ModelCatalog(named, caps)
