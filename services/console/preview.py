"""What the settings page shows for a draft of overrides (R17, R7.7, R6.1): the effective
policy with each value's provenance, errors per field path, the InputBudget and every
trigger threshold as exact integer tokens per purpose, and a dry run of the next prepare.

Pure: the page's handlers read the release and the session, then call these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain.budget import ModelProfile
from domain.policy import ContextPolicy, validate_policy
from domain.rendering import RecordView
from domain.selection import build_groups, select_prefix
from domain.triggers import CompactionState, Counters, Observation, evaluate_triggers
from domain.triggers import ratio_threshold as tokens_at
from schemas.errors import InvalidPolicy

PURPOSES = ("action", "completion", "compaction")
COUNTERS = ("user_turns", "model_steps", "baseline_user_turns", "baseline_model_steps")


@dataclass(frozen=True)
class Field:
    path: str  # "compaction.context_ratio"
    label: str
    kind: str  # ratio | count | number
    nullable: bool = False
    help: str = ""


FIELDS: tuple[Field, ...] = (
    Field("recent_complete_groups", "Recent complete groups kept verbatim", "count"),
    Field(
        "compaction.context_ratio",
        "Context ratio trigger",
        "ratio",
        True,
        "EstimatedInput / InputBudget at which compaction starts; empty to inherit, off to disable",
    ),
    Field("compaction.user_turns", "New questions trigger", "count", True, "off by default"),
    Field("compaction.model_steps", "Model steps trigger", "count", True, "off by default"),
    Field("compaction.target_context_ratio", "Target context ratio", "ratio"),
    Field("compaction.max_compaction_calls", "Max summarizer calls per job", "count"),
    Field("compaction.retry_growth_ratio", "Retry growth ratio", "ratio"),
    Field("compaction.job_timeout_s", "Job timeout (seconds)", "number"),
    Field("compaction.summary_max_ratio", "Summary max share of InputBudget", "ratio"),
    Field("large_result.inline_max_tokens", "Largest result shown inline (tokens)", "count"),
    Field("large_result.preview_chars", "Preview of a large result (characters)", "count"),
)
_BY_NAME = {f.path.rpartition(".")[2]: f.path for f in FIELDS}
OFF = ("off", "null", "none")


def _value(text: str) -> Any:
    t = text.strip()
    if t.lower() in OFF:
        return None
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t  # kept as typed: validation names the field


def overrides_from_form(form: Mapping[str, str]) -> dict[str, Any]:
    """Form fields (named by path) → nested overrides; an empty field inherits."""
    out: dict[str, Any] = {}
    for f in FIELDS:
        raw = str(form.get(f.path, "") or "")
        if not raw.strip():
            continue
        section, _, name = f.path.rpartition(".")
        (out.setdefault(section, {}) if section else out)[name] = _value(raw)
    return out


def _path(exc: InvalidPolicy) -> str:
    if exc.details.get("path"):  # the complete policy names the whole path
        return str(exc.details["path"])
    name = str(exc.details.get("field") or "")
    if exc.details.get("rule") == "no_trigger_enabled":
        return "compaction.context_ratio"
    return _BY_NAME.get(name, name or "policy")


def _single(path: str, value: Any) -> dict[str, Any]:
    section, _, name = path.rpartition(".")
    return {section: {name: value}} if section else {name: value}


def field_errors(overrides: Mapping[str, Any]) -> dict[str, str]:
    """Every rule broken by the draft, keyed by field path (R7.7: publish refuses them).
    Each override is checked alone, then the whole draft for the rules across fields."""
    errors: dict[str, str] = {}
    for path, value in flatten(overrides).items():
        try:
            validate_policy(_single(path, value))
        except InvalidPolicy as exc:
            if exc.details.get("rule") != "target_not_below_trigger":
                errors.setdefault(path, exc.message)
    if not errors:
        try:
            validate_policy(overrides)
        except InvalidPolicy as exc:
            errors[_path(exc)] = exc.message
    return errors


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping):
            out |= flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def effective(overrides: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each value of the effective policy and where it came from (R17)."""
    given = flatten(overrides)
    defaults = flatten(ContextPolicy().to_dict())
    return [
        {
            "path": path,
            "value": given.get(path, default),
            "default": default,
            "source": "override" if path in given else "platform default",
        }
        for path, default in defaults.items()
    ]


def thresholds(policy: ContextPolicy, model_profile: Mapping[str, Any]) -> list[dict[str, Any]]:
    """InputBudget and the trigger thresholds in tokens, per purpose (R6.1, R7.8). One
    model profile per release today: the purposes share it; compaction calls carry no
    tools and never trigger compaction themselves (R11.3, R8.2)."""
    profile = ModelProfile.from_dict(model_profile)
    budget = profile.input_budget()
    c = policy.compaction
    rows = []
    for purpose in PURPOSES:
        compacts = purpose == "action"
        rows.append(
            {
                "purpose": purpose,
                "model": profile.name,
                "input_budget": budget,
                "context_trigger": tokens_at(c.context_ratio, budget)
                if compacts and c.context_ratio is not None
                else None,
                "target": tokens_at(c.target_context_ratio, budget) if compacts else None,
                "retry_growth": tokens_at(c.retry_growth_ratio, budget) if compacts else None,
                "summary_max": tokens_at(c.summary_max_ratio, budget),
                "user_turns": c.user_turns if compacts else None,
                "model_steps": c.model_steps if compacts else None,
            }
        )
    return rows


def dry_run(
    records: Sequence[RecordView],
    covered: frozenset[str],
    policy: ContextPolicy,
    counters: Mapping[str, int],
    estimated_input: int,
    input_budget: int,
) -> dict[str, Any]:
    """What the next prepare would do under ``policy``: which records stay verbatim,
    which a compaction would summarize (and whether a trigger fires now), which large
    results are shown as views. Reads nothing, writes nothing."""
    visible = [r for r in records if r.record_id not in covered]
    sel = select_prefix(build_groups(visible), policy.recent_complete_groups)
    state = CompactionState(
        totals=Counters(counters.get("user_turns", 0), counters.get("model_steps", 0)),
        baseline=Counters(
            counters.get("baseline_user_turns", 0), counters.get("baseline_model_steps", 0)
        ),
    )
    obs = Observation(estimated_input, input_budget, 0, sel.compressible_tokens, "dry-run")
    decision = evaluate_triggers(state, policy.compaction, obs)
    summarize = {i for g in sel.covered for i in g.record_ids}
    limit = policy.large_result.inline_max_tokens
    rows = []
    for r in visible:
        if r.record_id in summarize:
            action = "summarize" if decision.start_job else "summarize when a trigger fires"
        elif r.kind == "tool_outcome" and r.token_count > limit:
            action = "externalize"
        else:
            action = "keep"
        rows.append(
            {
                "record_id": r.record_id,
                "sequence": r.session_sequence,
                "kind": r.kind,
                "tokens": r.token_count,
                "action": action,
            }
        )
    return {
        "start_job": decision.start_job,
        "fired": list(decision.fired),
        "reason": decision.reason or sel.deferral_reason,
        "values": decision.values,
        "thresholds": decision.thresholds,
        "already_summarized": len(covered),
        "records": rows,
    }
