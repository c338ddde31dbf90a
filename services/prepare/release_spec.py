"""What a release holds, typed: the one model that publishing validates and
that every prepare reads, so that a release which publishes can be prepared for.

A prepare reads a release's tools (their names, for the catalog and the provider
request), its skill bindings (name and version, R12.1/R12.2), its model profile (the
budget arithmetic and the provider format, R6) and its policy (R17). Each is parsed here
— at publish from the request, at load from the stored row — and the prepare path takes
them only from the parsed form, never from the raw JSON: a field a prepare needs is a
field of these models, so publish refuses exactly what a prepare could not use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, ValidationError

from domain.policy.sections import HOOK_POINTS, HookBinding
from domain.window.budget import ModelProfile
from schemas.errors import InvalidPolicy
from services.model_profiles import model_profile
from services.prepare.fields import Id, json_path
from storage.releases import Release

# The name rule every provider format shares (OpenAI and Anthropic function names): a
# name outside it publishes but fails at the provider on every model call.
TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"
MAX_TOOLS = 256
MAX_SKILLS = 256


class ToolSpec(BaseModel):
    """A tool of the catalog as a prepare offers it: ``name`` (what the model calls),
    ``description`` and a JSON schema (``parameters`` or ``input_schema``). Other fields
    are kept as given (a provider's ``strict``, …) and counted with the schema."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: Annotated[str, Field(pattern=TOOL_NAME, description="^[A-Za-z0-9_-]{1,64}$")]
    description: str = ""
    parameters: dict[str, Any] | None = None
    input_schema: dict[str, Any] | None = None

    def wire(self) -> dict[str, JsonValue]:
        """As published (defaults not spelled out): what the model is shown and counted."""
        return self.model_dump(mode="json", exclude_unset=True)


class SkillBinding(BaseModel):
    """R12.1/R12.2: a skill this release binds — listed in the catalog by name, version,
    description and load entry; activated only at exactly this version (and content hash,
    when pinned). ``{"skill_id", "revision"}`` is not a spelling of it: refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Id
    version: Id
    description: str = ""
    load_entry: Id = "load_skill"
    content_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None

    def wire(self) -> dict[str, JsonValue]:
        """As published (defaults not spelled out)."""
        return self.model_dump(mode="json", exclude_unset=True)


def _hook_point(v: str) -> str:
    if v not in HOOK_POINTS:
        raise ValueError(f"must be one of {list(HOOK_POINTS)}")
    return v


class ReleaseHook(HookBinding):
    """A hook binding frozen with the release (as the policy's ``hook_bindings`` bind
    them: point, hook, version); further fields are kept as given."""

    model_config = ConfigDict(extra="allow", frozen=True)

    point: Annotated[
        str, AfterValidator(_hook_point), Field(json_schema_extra={"enum": list(HOOK_POINTS)})
    ]
    hook: Id
    version: Id | None = None


def _unique_names(what: str) -> Any:
    def check(items: list[Any]) -> list[Any]:
        seen: dict[str, int] = {}
        for i, item in enumerate(items):
            if item.name in seen:
                raise ValueError(
                    f"[{i}].name {item.name!r} repeats [{seen[item.name]}]: one {what} per name"
                )
            seen[item.name] = i
        return items

    return AfterValidator(check)


Tools = Annotated[list[ToolSpec], Field(max_length=MAX_TOOLS), _unique_names("tool")]
Skills = Annotated[list[SkillBinding], Field(max_length=MAX_SKILLS), _unique_names("skill")]
Hooks = Annotated[list[ReleaseHook], Field(max_length=64)]


class ReleaseParts(BaseModel):
    """The typed parts of a stored release (its other fields are typed by ``Release``)."""

    tool_catalog: Tools
    skill_bindings: Skills
    hook_bindings: Hooks


@dataclass(frozen=True)
class ReleaseView:
    """A release as a prepare reads it: the stored row and its parsed parts."""

    release: Release
    tools: tuple[ToolSpec, ...]
    skills: tuple[SkillBinding, ...]
    profile: ModelProfile


def view_of(rel: Release, counting_method: str | None = None) -> ReleaseView:
    """A stored release parsed as at publish. A release stored before publishing checked
    its parts and holding one a prepare cannot use is refused with the path of
    the offending field (422), not a 500 on every prepare."""
    try:
        parts = ReleaseParts.model_validate(
            {k: getattr(rel, k) for k in ("tool_catalog", "skill_bindings", "hook_bindings")}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = json_path(first["loc"])
        raise InvalidPolicy(
            f"release {rel.release_id} was published with {where} that no prepare can use:"
            f" {first['msg']}; publish a corrected release",
            path=where,
            json_path=where,
            rule="stored_release_invalid",
            release_id=rel.release_id,
        ) from exc
    profile = model_profile(rel.model_profile, counting_method)
    return ReleaseView(rel, tuple(parts.tool_catalog), tuple(parts.skill_bindings), profile)
