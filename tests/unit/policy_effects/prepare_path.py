"""Prepare's path for the policy-field effect table: a release carrying the policy
overrides is published into the fake-backed Prepare (``PrepareWorld``: the real use cases
over in-memory ports, wired by the real bootstrap), a thread is arranged as the processor
would have committed it, and a prepare is asked for. A probe returns what the answer shows
— or, when the prepare (or the publish) is refused, the refusal's code and reason."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from domain.context.rendering import RecordView
from domain.window.budget import ModelProfile
from domain.window.model_catalog import ModelCatalog
from schemas.errors import ContextError
from services.prepare.assembly.prepare_hooks import HookRegistry
from services.prepare.bodies import PrepareIn, ReleaseIn, SessionIn
from services.prepare.bootstrap import Options
from tests.unit.fakes.child_threads import ExportingThreads
from tests.unit.fakes.prepare import PROFILE, PrepareWorld

Overrides = dict[str, Any]
Probe = Callable[[Overrides], Awaitable[Any]]
Scene = Callable[[PrepareWorld], PrepareIn]
Answer = dict[str, Any]

SID, RUN = "s1", "r1"
MAIN, CHILD = f"{RUN}.main", f"{RUN}.child"
# The deployment's catalog a policy may reference (ALC_MODEL_PROFILES_FILE, ALC_MODEL_LIMITS).
CATALOG = ModelCatalog({"small": ModelProfile("small", 3000, 300, 50)}, {"cap": 2000})
TOOL = {
    "name": "grep",
    "description": "Search the repository",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
}


def world(hooks: Sequence[object] = ()) -> PrepareWorld:
    options = Options(compaction_wait_s=5.0, models=CATALOG)
    threads = ExportingThreads()
    return PrepareWorld(hooks=HookRegistry(tuple(hooks)), options=options, threads=threads)


async def publish(w: PrepareWorld, overrides: Overrides, **release: Any) -> None:
    """Publish the release with ``overrides`` as its context_policy and open the session."""
    body = {
        "release_id": "rel",
        "agent_id": "agent",
        "instructions": "Answer briefly.",
        "model_profile": PROFILE,
        "tool_catalog": [TOOL],
        "context_policy": overrides,
    }
    await w.svc.releases.register(ReleaseIn.model_validate(body | release), "space")
    await w.svc.runs.open_session(SessionIn(session_id=SID, release_id="rel"), "space", "al")


async def publish_outcome(overrides: Overrides) -> str:
    """``published``, or ``refused:<rule>`` with the rule the refusal names."""
    try:
        await publish(world(), overrides)
    except ContextError as exc:
        return f"refused:{exc.code}:{exc.details.get('rule')}"
    return "published"


def prepare_probe(
    scene: Scene,
    observe: Callable[[Answer], Any],
    hooks: Callable[[], Sequence[object]] = tuple,
    **release: Any,
) -> Probe:
    """A probe: publish (with ``release``'s extra fields), arrange ``scene``, prepare."""

    async def probe(overrides: Overrides) -> Any:
        w = world(hooks())
        await publish(w, overrides, **release)
        body = scene(w)
        try:
            out = await w.svc.preparer.prepare(SID, RUN, body)
        except ContextError as exc:
            return ("refused", exc.code, exc.details.get("reason"))
        # The answer as the API serves it (the typed PreparedContext, or its dict form).
        return observe(out.model_dump(mode="json") if isinstance(out, BaseModel) else out)

    return probe


def say(
    w: PrepareWorld,
    run: str,
    kind: str,
    text: str,
    authority: str | None = None,
    instance: str | None = None,
    **payload: Any,
) -> RecordView:
    """``PrepareWorld.say`` with the authority and thread a record of ``kind`` carries
    when the host (not the model or a tool) wrote it, or when a child's thread holds it."""
    rec = w.say(SID, run, kind, text, **payload)
    rec = replace(
        rec, authority=authority or rec.authority, instance_id=instance or rec.instance_id
    )
    w.threads.records[-1] = rec
    return rec


# --- scenes --------------------------------------------------------------------------


def question(purpose: str = "action", child: bool = False) -> Scene:
    """One question on the main thread (and one on the child's, for a child's call)."""

    def scene(w: PrepareWorld) -> PrepareIn:
        w.run(SID, RUN)
        w.say(SID, RUN, "user_input", "Where is the tokenizer defined?")
        if child:
            say(w, RUN, "user_input", "Read tokenizer.py.", instance=CHILD)
        return PrepareIn.model_validate(
            {"purpose": purpose, "instance_id": CHILD if child else None}
        )

    return scene


def tool_result(chars: int) -> Scene:
    """A question and one grep call whose result is ``chars`` characters long."""

    def scene(w: PrepareWorld) -> PrepareIn:
        w.run(SID, RUN)
        w.say(SID, RUN, "user_input", "Find every use of the tokenizer.")
        call = {"call_id": "c1", "name": "grep", "arguments_json": '{"q": "tok"}'}
        w.say(SID, RUN, "assistant_message", "Searching.", tool_calls=[call])
        text = "".join(f"src/m{i:04d}.py:1: import tokenizer\n" for i in range(chars // 34 + 1))
        w.say(SID, RUN, "tool_outcome", text[:chars], call_id="c1", name="grep", status="ok")
        return PrepareIn()

    return scene


# --- what an answer shows --------------------------------------------------------------


def input_budget(out: Answer) -> int:
    return int(out["budget"]["input_budget"])


def tool_names(out: Answer) -> list[str]:
    return [str(t["name"]) for t in out["tools"]]


def contents(out: Answer) -> list[tuple[str, str]]:
    return [(str(m["role"]), str(m["content"])) for m in out["messages"]]


def retention(out: Answer) -> dict[str, list[str]]:
    """Each block category's retention labels, as the prepared messages carry them."""
    found: dict[str, set[str]] = {}
    for m in out["messages"]:
        found.setdefault(str(m["category"]), set()).add(str(m["retention"]))
    return {c: sorted(v) for c, v in sorted(found.items())}


def decisions(out: Answer) -> list[tuple[str, str]]:
    return sorted((str(d["decision"]), str(d.get("reason"))) for d in out["decisions"])
