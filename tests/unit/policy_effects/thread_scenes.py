"""Threads arranged in the fake-backed Prepare for the policy-field effect table: one
block of every category (retention rules), a loaded hook (hook bindings), verified skills
loaded runs apart (active_skill_policy), and a child's background and result
(child_transfer_policy). Each scene writes the records the processor would have committed
and returns the prepare's request body."""

from __future__ import annotations

import hashlib
from typing import Any

from domain.compaction.triggers import Counters
from services.prepare.assembly.prepare_hooks import PrepareAdjust, PrepareRequest
from services.prepare.bodies import PrepareIn
from storage.compaction.summary_reuse import SummaryRef
from storage.records.threads import SummaryView
from tests.unit.fakes.child_threads import ExportingThreads
from tests.unit.fakes.prepare import PrepareWorld
from tests.unit.policy_effects.prepare_path import CHILD, RUN, SID, Answer, Scene, say

EARLIER = "r0"


def every_category(w: PrepareWorld) -> PrepareIn:
    """A summary, an earlier run's exchange (history), a state note, the task, a tool
    group (interactions, tool_results), an answer (interactions), a child's result and a
    retrieved passage (material)."""
    say(w, EARLIER, "user_input", "What was decided about the parser?")
    say(w, EARLIER, "assistant_message", "Keep the hand-written parser.")
    w.run(SID, RUN, through=2)
    w.compaction.summary_ref = SummaryRef("sum-1", None, RUN, 2, 0, (), Counters())
    w.compaction.summaries["sum-1"] = SummaryView(
        "sum-1", "Earlier the team chose plan B.", 9, frozenset()
    )
    say(w, RUN, "resource_activation", "", "host", resource_kind="doc", resource_id="d1")
    say(w, RUN, "user_input", "Find every use of the tokenizer.")
    call = {"call_id": "c1", "name": "grep", "arguments_json": '{"q": "tok"}'}
    say(w, RUN, "assistant_message", "Searching.", tool_calls=[call])
    say(w, RUN, "tool_outcome", "a.py b.py", call_id="c1", name="grep", status="ok")
    say(w, RUN, "assistant_message", "Found it in two files.")
    say(w, RUN, "child_result", "The child checked c.py too.", "host", child_instance_id="k1")
    passage = {"citation_id": "kb-1", "version": "1", "text": "A passage about tokens."}
    return PrepareIn(material=[passage])


class Marker:
    """A loaded Prepare hook that adds a passage before a prepare assembles."""

    name, version, timeout_s = "marker", "1", 2.0

    async def prepare_before(self, req: PrepareRequest) -> PrepareAdjust:
        return PrepareAdjust(add_material=({"citation_id": "hook", "text": "Hook passage."},))


MARKER = {"point": "context.prepare.before", "hook": "marker", "version": "1"}


def markers() -> tuple[object, ...]:
    return (Marker(),)


# --- skills (R12.3) ------------------------------------------------------------------------

BODIES = {
    "alpha": "Rules of the alpha skill: " + "always cite the file and line. " * 3,
    "beta": "Rules of the beta skill: " + "run the tests before answering. " * 6,
}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


SKILLS = [
    {"name": n, "version": "1", "description": f"{n} rules", "content_sha256": _sha(b)}
    for n, b in BODIES.items()
]


def _load(w: PrepareWorld, run: str, name: str, call_id: str) -> None:
    ref = {"name": name, "revision": "1", "content_hash": _sha(BODIES[name])}
    call = {"call_id": call_id, "name": "load_skill", "arguments_json": f'{{"n": "{name}"}}'}
    say(w, run, "assistant_message", f"Loading {name}.", tool_calls=[call])
    status = {"call_id": call_id, "name": "load_skill", "status": "ok"}
    say(w, run, "tool_outcome", BODIES[name], skill=ref, **status)
    activation = {"resource_kind": "skill", "resource_id": name, "version": "1"}
    say(
        w,
        run,
        "resource_activation",
        "",
        "host",
        content_hash=ref["content_hash"],
        active=True,
        **activation,
    )


def skills_runs_apart(w: PrepareWorld) -> PrepareIn:
    """beta loaded in the first run, two runs without it, alpha loaded now."""
    say(w, EARLIER, "user_input", "Set up the project.")
    _load(w, EARLIER, "beta", "k0")
    say(w, EARLIER, "assistant_message", "Done.")
    for i in (1, 2):
        say(w, f"r0{i}", "user_input", f"Question {i}.")
        say(w, f"r0{i}", "assistant_message", f"Answer {i}.")
    w.run(SID, RUN, through=len(w.threads.records))
    say(w, RUN, "user_input", "Review the change.")
    _load(w, RUN, "alpha", "k1")
    return PrepareIn()


def active_skills(out: Answer) -> tuple[Any, ...]:
    """The active skill instruction blocks and the skills released, with why."""
    active = [str(m["skill"]) for m in out["messages"] if m.get("block") == "skill_instruction"]
    released = sorted(
        (str(d["skill"]), str(d["reason"])) for d in out["decisions"] if d["decision"] == "released"
    )
    return tuple(active), tuple(released)


# --- child threads (R13.2) -------------------------------------------------------------------


def child_with_background(w: PrepareWorld) -> PrepareIn:
    """The parent exported three records (10, 30 and 5 tokens) to a child asked one thing."""
    assert isinstance(w.threads, ExportingThreads)
    say(w, RUN, "user_input", "Delegate the reading.")
    exported = [
        say(w, RUN, "user_input", text)
        for text in ("Use v2 API.", "The config lives in conf/app.toml today.", "No CI")
    ]
    w.run(SID, RUN, through=len(w.threads.records))
    w.threads.exported[(SID, RUN, CHILD)] = exported
    say(w, RUN, "user_input", "Read the config.", instance=CHILD)
    return PrepareIn(instance_id=CHILD)


def child_result(chars: int) -> Scene:
    """A parent whose child returned a result of ``chars`` characters."""

    def scene(w: PrepareWorld) -> PrepareIn:
        w.run(SID, RUN)
        say(w, RUN, "user_input", "Ask a child to read the logs.")
        text = ("The nightly build failed at the link step. " * (chars // 44 + 1))[:chars]
        say(w, RUN, "child_result", text, "host", child_instance_id="k1")
        return PrepareIn()

    return scene


def material(out: Answer) -> list[tuple[str, Any]]:
    """The material blocks and the decisions that dropped or cut any (with their reason)."""
    blocks = [str(m["content"]) for m in out["messages"] if m["category"] == "material"]
    cut = [str(d.get("reason")) for d in out["decisions"] if d["decision"] != "kept"]
    return [("material", tuple(blocks)), ("decisions", tuple(sorted(cut)))]
