"""Which skills are active in a prepare (R12.2, R12.3) under the release's
``active_skill_policy`` (R17). Pure.

A skill is a candidate when it is verified: the host activated it, the release binds that
revision (and hash, when the binding pins one) and a load result with exactly that
content exists. The policy then decides, in this order:

1. ``idle_runs_before_release``: a skill whose last use (its load result or the host's
   activation record) lies more than N completed runs back is released — the runs between
   that use and the current run are the idle ones;
2. ``max_active_skills``: of the rest, the N most recently used stay active (ties by
   name); the others are released;
3. ``max_instruction_tokens``: an active skill whose body is larger is a budget conflict
   (R10.4, R12.3): ``ContextBudgetExceeded`` with the sizes, never a cut body.

A released skill is not an instruction block: its first load result, while in view,
stays an ordinary tool result, and it is not re-provided after a summary. Loading it
again (or the host activating it again) makes it a candidate again. Each release is a
decision with its reason (R4.2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from domain.policy.sections import ActiveSkillPolicy
from domain.window.record_view import RecordView, SkillActivation, SkillLoad
from schemas.errors import ContextBudgetExceeded


class SkillFacts(Protocol):
    """What a rendered thread tracks about skills (``domain.context.rendering.ThreadRenderer``)."""

    skill_loads: dict[str, SkillLoad]
    activations: dict[str, SkillActivation]
    skill_used: dict[str, tuple[int, int]]
    runs: dict[str, int]


@dataclass(frozen=True)
class Candidate:
    """A skill the assembler considers: ``load`` is None when it is not verified (``why``)."""

    name: str
    load: SkillLoad | None
    why: str = ""


def track(thread: SkillFacts, rec: RecordView) -> None:
    """Skill state is tracked for every record, summarized or not: after the load group
    is summarized the assembler re-provides the body from it (R12.3). ``runs`` numbers
    the thread's runs in the order their first record was fed; ``skill_used`` holds each
    skill's last use (run number, session sequence): a load result or an activation."""
    if rec.run_id is not None and rec.run_id not in thread.runs:
        thread.runs[rec.run_id] = len(thread.runs)
    p = rec.payload
    if rec.kind == "tool_outcome" and isinstance(p.get("skill"), dict):
        ref = p["skill"]
        sha = rec.content_sha256 or ""
        name = str(ref.get("name"))
        load = SkillLoad(
            rec.record_id, name, str(ref.get("revision")), sha, rec.text, rec.token_count, None
        )
        thread.skill_loads[sha] = load
    elif rec.kind == "resource_activation" and p.get("resource_kind") == "skill":
        name = str(p.get("resource_id"))
        thread.activations[name] = SkillActivation(
            name,
            str(p.get("version")),
            str(p.get("content_hash")),
            rec.authority,
            bool(p.get("active", True)),
            rec.record_id,
        )
    else:
        return
    run = thread.runs.get(rec.run_id or "", max(thread.runs.values(), default=0))
    thread.skill_used[name] = (run, rec.session_sequence)


def candidates(thread: SkillFacts, bindings: Sequence[Mapping[str, Any]]) -> list[Candidate]:
    """Verified active skills (R12.2), by name. A tool result's own claim is never enough:
    a load naming a skill the host never activated stays an ordinary tool result."""
    by_name = {str(b["name"]): b for b in bindings}
    out: list[Candidate] = []
    for name in sorted(thread.activations):
        act = thread.activations[name]
        if not act.active:
            continue
        b = by_name.get(name)
        load = thread.skill_loads.get(act.content_hash)
        why = ""
        if act.authority != "host":
            why = "activation_not_host_verified"
        elif b is None:
            why = "skill_not_bound_in_release"
        elif str(b.get("version")) != act.version:
            why = "revision_mismatch"
        elif b.get("content_sha256") and b["content_sha256"] != act.content_hash:
            why = "content_hash_mismatch"
        elif load is None or load.name != name or load.revision != act.version:
            why = "no_matching_load_result"
        out.append(Candidate(name, None if why else load, why))
    claimed = {load.name for load in thread.skill_loads.values()} - set(thread.activations)
    out.extend(Candidate(name, None, "no_host_activation") for name in sorted(claimed))
    return out


def idle_runs(thread: SkillFacts, name: str) -> int:
    """Completed runs of this thread since the skill's last use (the current run — the
    latest one fed — does not count). A skill with no recorded use counts as used now."""
    used = thread.skill_used.get(name)
    if used is None or not thread.runs:
        return 0
    return max(0, max(thread.runs.values()) - used[0] - 1)


def apply_policy(
    thread: SkillFacts, found: Sequence[Candidate], policy: ActiveSkillPolicy | None
) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """The candidates that stay (verified ones within the policy, and the unverified ones
    for their decisions), in name order, and one ``released`` decision per skill the
    policy released. Raises ``ContextBudgetExceeded`` for an oversized active skill."""
    if policy is None:
        return list(found), []
    released: list[dict[str, Any]] = []
    live: list[Candidate] = []
    for c in found:
        if c.load is None:
            continue
        idle = idle_runs(thread, c.name)
        limit = policy.idle_runs_before_release
        if limit is not None and idle >= limit:
            released.append(_released(c.load, "skill_idle_released", idle_runs=idle, limit=limit))
        else:
            live.append(c)
    live.sort(key=lambda c: (-_last_use(thread, c), c.name))
    for c in live[policy.max_active_skills :]:
        assert c.load is not None
        released.append(_released(c.load, "skill_over_max_active", limit=policy.max_active_skills))
    kept = {c.name for c in live[: policy.max_active_skills]}
    for c in live[: policy.max_active_skills]:
        _check_size(c, policy.max_instruction_tokens)
    out = [c for c in found if c.load is None or c.name in kept]
    return out, released


def _last_use(thread: SkillFacts, c: Candidate) -> int:
    used = thread.skill_used.get(c.name)
    return used[1] if used is not None else 0


def _released(load: SkillLoad, reason: str, **details: Any) -> dict[str, Any]:
    return {
        "block_id": f"skill:{load.name}@{load.revision}",
        "decision": "released",
        "reason": reason,
        "skill": f"{load.name}@{load.revision}",
        "record_ids": [load.record_id],
        **details,
    }


def _check_size(c: Candidate, cap: int | None) -> None:
    assert c.load is not None
    if cap is not None and c.load.tokens > cap:
        raise ContextBudgetExceeded(
            f"active skill {c.name} v{c.load.revision} has {c.load.tokens} instruction"
            f" tokens, over the release's active_skill_policy.max_instruction_tokens {cap};"
            " a skill body is never cut: bind a smaller revision, raise the cap or"
            " deactivate the skill",
            reason="skill_instruction_over_cap",
            skill=f"{c.name}@{c.load.revision}",
            skill_tokens=c.load.tokens,
            max_instruction_tokens=cap,
            field="active_skill_policy.max_instruction_tokens",
        )
