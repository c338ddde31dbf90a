"""The platform defaults of the ContextPolicy (R17), versioned: one Python literal, so the
pure core reads them as a constant (no package file is opened at run time). Raise
``DEFAULTS_VERSION`` with any change of a default; ``domain.policy.defaults`` merges an
agent's overrides over ``POLICY_DEFAULTS``."""

from __future__ import annotations

from typing import Any, Final

DEFAULTS_VERSION: Final = 2

POLICY_DEFAULTS: Final[dict[str, Any]] = {
    "api_version": "v1",
    "purpose_profiles": {
        "action": {
            "model_profile_ref": None,
            "output_reserve": None,
            "safety_margin": None,
            "tools_allowed": True,
        },
        "completion": {
            "model_profile_ref": None,
            "output_reserve": None,
            "safety_margin": None,
            "tools_allowed": True,
        },
        "compaction": {
            "model_profile_ref": None,
            "output_reserve": None,
            "safety_margin": None,
            "tools_allowed": False,
        },
        "child": {
            "model_profile_ref": None,
            "output_reserve": None,
            "safety_margin": None,
            "tools_allowed": True,
        },
    },
    "model_limit_ref": None,
    "retention_rules": {
        "task": "required",
        "state": "active",
        "summary": "active",
        "history": "compressible",
        "interactions": "compressible",
        "tool_results": "compressible",
        "material": "optional",
    },
    "recent_complete_groups": 2,
    "compaction": {
        "context_ratio": 0.8,
        "user_turns": None,
        "model_steps": None,
        "target_context_ratio": 0.6,
        "max_compaction_calls": 4,
        "retry_growth_ratio": 0.05,
        "job_timeout_s": 120.0,
        "summary_max_ratio": 0.15,
        "rollup": "auto",
    },
    "large_result_policy": {"inline_max_tokens": 4000, "preview_chars": 2000},
    "active_skill_policy": {
        "max_active_skills": 8,
        "max_instruction_tokens": None,
        "idle_runs_before_release": None,
    },
    "hook_bindings": [],
    "child_transfer_policy": {
        "max_background_refs": 20,
        "max_background_tokens": None,
        "max_result_tokens": None,
        "inherit_constraints": True,
    },
}
