"""Issue 40 item 3: a trigger kind and a provider format are each one module registered in
one table. A toy kind and a toy format are each written as a single file into a
temporary folder, imported, registered, and take effect through the product's public
functions (``evaluate_triggers``; ``render`` and ``sent_roles``) — no product file
changes."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from domain.compaction.trigger_kinds.table import TRIGGER_KINDS, register, unregister
from domain.compaction.triggers import CompactionState, Counters, Observation, evaluate_triggers
from domain.context.formats.table import FORMAT_TABLE
from domain.context.formats.table import unregister as unregister_format
from domain.context.providers import FORMATS, render
from domain.context.sent_view import sent_roles
from domain.policy.context_policy import CompactionPolicy
from domain.policy.defaults import TRIGGERS
from streams.genai import provider_of

# The whole toy kind: its policy field (declared on a policy of its own, since the
# release parser knows only the built-in fields), its check and its reason.
TOY_TRIGGER = """
from __future__ import annotations

from dataclasses import dataclass

from domain.compaction.trigger_kinds.kind import Reading, TriggerInputs, TriggerKind
from domain.compaction.trigger_kinds.table import register
from domain.policy.context_policy import CompactionPolicy

REASON = "toy_compressible_share"


@dataclass(frozen=True)
class ToyPolicy(CompactionPolicy):
    toy_compressible_share: float | None = None


def _check(i: TriggerInputs, fired: tuple[str, ...]) -> Reading | None:
    share = getattr(i.policy, "toy_compressible_share", None)
    if share is None:
        return None
    at = int(share * i.obs.input_budget)
    got = i.obs.compressible_tokens
    return Reading({"toy_tokens": got}, {"toy_tokens": at}, got >= at)


KIND = TriggerKind(REASON, "toy_compressible_share", _check)


def install() -> None:
    register(KIND)
"""


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def toy_trigger(tmp_path: Path) -> Iterator[ModuleType]:
    path = tmp_path / "toy_trigger.py"
    path.write_text(textwrap.dedent(TOY_TRIGGER), "utf-8")
    assert [p.name for p in tmp_path.iterdir()] == ["toy_trigger.py"]  # one file
    module = _load(path, "toy_trigger")
    module.install()
    try:
        yield module
    finally:
        unregister(module.REASON)
        sys.modules.pop("toy_trigger", None)


def _obs(compressible: int) -> Observation:
    return Observation(10_000, 100_000, 1_000, compressible, "fp")


@pytest.mark.spec("R7.4")
def test_a_toy_trigger_in_one_file_fires_through_evaluate_triggers(
    toy_trigger: ModuleType,
) -> None:
    off = {"context_ratio": None, "user_turns": None, "model_steps": None}
    policy = toy_trigger.ToyPolicy(**off, toy_compressible_share=0.05)
    d = evaluate_triggers(CompactionState(), policy, _obs(5_000))
    assert d.start_job and d.fired == ("toy_compressible_share",)
    assert (d.values["toy_tokens"], d.thresholds["toy_tokens"]) == (5_000, 5_000)
    below = evaluate_triggers(CompactionState(), policy, _obs(4_999))
    assert not below.start_job and below.reason == "below_thresholds"
    # beside a built-in condition: both reported, one job (R7.4)
    both = toy_trigger.ToyPolicy(**{**off, "user_turns": 2}, toy_compressible_share=0.05)
    state = CompactionState(totals=Counters(user_turns=2))
    d2 = evaluate_triggers(state, both, _obs(5_000))
    assert d2.start_job and d2.fired == ("user_turns", "toy_compressible_share")


def test_without_the_toy_module_its_condition_is_unknown() -> None:
    assert "toy_compressible_share" not in TRIGGER_KINDS
    policy = CompactionPolicy(context_ratio=None, user_turns=2, model_steps=None)
    d = evaluate_triggers(CompactionState(), policy, _obs(50_000))
    assert d.fired == () and d.reason == "below_thresholds"


def test_a_reason_is_registered_once(toy_trigger: ModuleType) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(toy_trigger.KIND)


def test_the_built_in_kinds_name_the_policys_trigger_fields() -> None:
    assert list(TRIGGER_KINDS)[:5] == [
        "context_ratio",
        "hard_budget",
        "cache_expired",
        "user_turns",
        "model_steps",
    ]
    fields = {k.policy_field for k in TRIGGER_KINDS.values()} - {None}
    assert fields == set(TRIGGERS)
    declared = set(CompactionPolicy.__dataclass_fields__)
    assert fields <= declared


# The whole toy format: its render, the roles its requests send, its cache lifetimes.
TOY_FORMAT = """
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from domain.context.formats.format import Message, ProviderFormat, RenderOptions, Tool
from domain.context.formats.table import register

NAME = "toy_transcript"


def _render(
    messages: Sequence[Message], tools: Sequence[Tool], o: RenderOptions
) -> dict[str, Any]:
    lines = [f"{m.get('role')}: {m.get('content', '')}" for m in messages]
    return {"transcript": "\\n".join(lines), "tools": [t["name"] for t in tools]}


def _sent_roles(
    messages: Sequence[Mapping[str, Any]], roles: list[str], sent: list[Any]
) -> list[str]:
    return ["transcript"] * len(messages)


FORMAT = ProviderFormat(NAME, _render, _sent_roles, ("5m",), "toy")


def install() -> None:
    register(FORMAT)
"""


@pytest.fixture
def toy_format(tmp_path: Path) -> Iterator[ModuleType]:
    path = tmp_path / "toy_format.py"
    path.write_text(textwrap.dedent(TOY_FORMAT), "utf-8")
    assert [p.name for p in tmp_path.iterdir()] == ["toy_format.py"]  # one file
    module = _load(path, "toy_format")
    module.install()
    try:
        yield module
    finally:
        unregister_format(module.NAME)
        sys.modules.pop("toy_format", None)


def test_a_toy_format_in_one_file_renders_through_render(toy_format: ModuleType) -> None:
    messages = [
        {"role": "user", "content": "hello", "block": "interaction"},
        {"role": "assistant", "content": "hi", "block": "interaction"},
    ]
    tools = [{"name": "search", "parameters": {"type": "object"}}]
    body = render(messages, tools, "toy_transcript")
    assert body == {"transcript": "user: hello\nassistant: hi", "tools": ["search"]}
    assert sent_roles(messages, body, "toy_transcript") == ["transcript", "transcript"]
    assert provider_of("toy_transcript") == "toy"  # the call span's gen_ai.provider.name


def test_without_the_toy_module_its_format_is_unknown() -> None:
    assert "toy_transcript" not in FORMAT_TABLE
    with pytest.raises(ValueError, match="unknown provider format"):
        render([], [], "toy_transcript")


def test_the_built_in_formats_are_the_tables() -> None:
    assert FORMATS == ("openai_chat", "openai_responses", "anthropic_messages")
    assert [provider_of(f) for f in FORMATS] == ["openai", "openai", "anthropic"]
    assert {f: FORMAT_TABLE[f].cache_ttls for f in FORMATS} == {
        "openai_chat": ("5m", "24h"),
        "openai_responses": ("5m", "24h"),
        "anthropic_messages": ("5m", "1h"),
    }
