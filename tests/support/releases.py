"""Hypothesis strategies of release bodies (issue 25): tools, skill bindings, hook
bindings, policy and model-profile variations — most valid, many not in one field."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from domain.context.providers import FORMATS
from domain.policy.sections import HOOK_POINTS
from tests.support.flows import PROFILE

_id = st.from_regex(r"[A-Za-z0-9_.:-]{1,12}", fullmatch=True)
_anything = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=6))
_tool_name = st.one_of(
    st.from_regex(r"[A-Za-z0-9_-]{1,16}", fullmatch=True),
    st.sampled_from(["", "has space", "x" * 65, "dotted.name", "read_content"]),
    _anything,
)
_tool = st.fixed_dictionaries(
    {},
    optional={
        "name": _tool_name,
        "description": st.one_of(st.text(max_size=30), _anything),
        "parameters": st.one_of(
            st.just({"type": "object", "properties": {"p": {"type": "string"}}}), _anything
        ),
        "input_schema": st.one_of(st.just({"type": "object"}), _anything),
        "strict": st.booleans(),
    },
)
_skill = st.one_of(
    st.fixed_dictionaries(
        {"name": _id, "version": _id},
        optional={
            "description": st.text(max_size=20),
            "load_entry": _id,
            "content_sha256": st.one_of(st.just("ab" * 32), st.just("nothex")),
        },
    ),
    st.fixed_dictionaries({"skill_id": _id, "revision": _id}),
    st.dictionaries(
        st.sampled_from(["name", "version", "description", "load_entry", "content_sha256"]),
        _anything,
        max_size=5,
    ),
)
_hook = st.fixed_dictionaries(
    {"point": st.sampled_from([*HOOK_POINTS, "nowhere"]), "hook": _id},
    optional={"version": st.one_of(_id, _anything)},
)
_policy = st.fixed_dictionaries(
    {},
    optional={
        "compaction": st.fixed_dictionaries(
            {},
            optional={
                "user_turns": st.one_of(st.none(), st.integers(-1, 4)),
                "model_steps": st.one_of(st.none(), st.integers(0, 4)),
                "context_ratio": st.one_of(st.none(), st.floats(0, 1.2)),
            },
        ),
        "recent_complete_groups": st.integers(-1, 4),
        "active_skill_policy": st.fixed_dictionaries(
            {}, optional={"max_active_skills": st.integers(0, 70)}
        ),
        "large_result_policy": st.fixed_dictionaries(
            {}, optional={"inline_max_tokens": st.integers(0, 3000)}
        ),
        "hook_bindings": st.lists(_hook, max_size=1),
    },
)


def releases(profile: dict[str, Any] = PROFILE) -> st.SearchStrategy[dict[str, Any]]:
    """Release bodies over ``profile`` (varied in provider format, overhead, reserve)."""
    profiles = st.fixed_dictionaries(
        {},
        optional={
            "provider_format": st.sampled_from([*FORMATS, "telegraph"]),
            "message_overhead": st.integers(0, 8),
            "output_reserve": st.integers(0, 20000),
        },
    ).map(lambda extra: profile | extra)
    return st.fixed_dictionaries(
        {"agent_id": _id, "instructions": st.text(max_size=40), "model_profile": profiles},
        optional={
            "tool_catalog": st.lists(_tool, max_size=3),
            "skill_bindings": st.lists(_skill, max_size=3),
            "hook_bindings": st.lists(_hook, max_size=2),
            "context_policy": _policy,
        },
    )
