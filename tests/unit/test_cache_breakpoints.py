"""Anthropic breakpoints inside the agent's tool loop (issue 39; docs/prompt-caching.md):
golden requests for a question with 0, 3, 15 and 40 tool steps, each replayed step by
step under the provider's rules (``domain.caching.replay``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from domain.caching.replay import AnthropicCache, Sent, Tally, prefix_ids, prefix_tokens
from domain.caching.requests import block_text, sent_request
from domain.caching.rules import LOOKBACK_BLOCKS, MAX_BREAKPOINTS, CacheRules
from domain.context.providers import render
from domain.window.budget import ModelProfile
from schemas.errors import InvalidPolicy

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "providers"
FMT = "anthropic_messages"
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file of the repository",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
# Each text's token count, as the assembler would have counted it; a block the table
# does not know (a tool_use's name and arguments) counts 1.
SIZES: dict[str, int] = {}


def _sized(text: str, tokens: int) -> str:
    SIZES[text] = tokens
    return text


TOOLS_TOKENS = 300
SIZES[block_text(render([], TOOLS, FMT)["tools"][0])] = TOOLS_TOKENS


def count(text: str) -> int:
    return SIZES.get(text, 1)


def msg(role: str, text: str, tokens: int, block: str = "interaction", **kw: Any) -> dict[str, Any]:
    return {"role": role, "content": _sized(text, tokens), "block": block, "tokens": tokens} | kw


SYSTEM = msg("system", "You are the build agent of this repository.", 1_200, "instruction")
SUMMARY = msg(
    "user", "[history summary sum_7] arm64 builds broke after the toolchain bump", 400, "summary"
)
QUESTION = msg("user", "Why does the nightly build fail on arm64?", 40)
PLAN = msg("user", "[plan v3] 1. read the logs 2. fix the flags", 30, "plan")


def step(k: int, fan_out: int = 1) -> list[dict[str, Any]]:
    """One model step: a text and ``fan_out`` calls, then their results."""
    calls = [
        {"id": f"c{k}.{j}", "name": "read_file", "arguments": json.dumps({"path": f"m{k}_{j}.py"})}
        for j in range(fan_out)
    ]
    text = f"Step {k}: reading {fan_out} file(s)."
    out = [msg("assistant", text, 20, tool_calls=calls)]
    out[0]["tokens"] += fan_out  # each tool_use block counts 1
    for c in calls:
        result = f"[{c['id']}] 120 lines of {c['id']}"
        out.append(msg("tool", result, 150, tool_call_id=c["id"], name="read_file", status="ok"))
    return out


def loop(steps: int, fan_out_last: int = 1) -> list[list[dict[str, Any]]]:
    """The requests of one question, one before each model call: the conversation so far
    and the frontier's plan after it."""
    conversation = [SYSTEM, SUMMARY, QUESTION]
    out = [[*conversation, PLAN]]
    for k in range(1, steps + 1):
        conversation = [*conversation, *step(k, fan_out_last if k == steps else 1)]
        out.append([*conversation, PLAN])
    return out


def requests(steps: int, rules: CacheRules, fan_out_last: int = 1) -> list[dict[str, Any]]:
    return [
        render(m, TOOLS, FMT, cache=rules, tools_tokens=TOOLS_TOKENS)
        for m in loop(steps, fan_out_last)
    ]


def sent(bodies: list[dict[str, Any]]) -> list[Sent]:
    return [sent_request(b, FMT, count, at_s=10.0 * i) for i, b in enumerate(bodies)]


CASES = {0: 1, 3: 1, 15: 1, 40: 12}  # steps -> calls in the last step (40: a fan-out)


@pytest.mark.spec("R4.3")
@pytest.mark.parametrize("steps", sorted(CASES))
def test_agent_loop_requests_match_the_golden_files(steps: int) -> None:
    body = requests(steps, CacheRules(), CASES[steps])[-1]
    got = json.dumps(body, indent=1, sort_keys=True) + "\n"
    path = GOLDEN / f"anthropic_loop_{steps}_steps.json"
    if os.environ.get("ALC_UPDATE_GOLDEN") == "1":
        path.write_text(got)
    assert got == path.read_text(), f"{path.name} differs (ALC_UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.parametrize("steps", sorted(CASES))
def test_the_last_block_is_marked_and_no_mark_is_under_the_minimum(steps: int) -> None:
    for s in sent(requests(steps, CacheRules(), CASES[steps])):
        tokens = prefix_tokens(s.blocks)
        assert 1 <= len(s.marks) <= MAX_BREAKPOINTS
        assert s.marks[-1] == len(s.blocks) - 2  # the conversation's end: the plan follows
        assert all(tokens[m] >= 1_024 for m in s.marks)


@pytest.mark.parametrize("steps", sorted(CASES))
def test_every_mark_is_within_the_lookback_of_the_entry_before_it(steps: int) -> None:
    """Replayed step by step: each mark has an entry (written by an earlier request at a
    prefix this one shares, or by its own mark before it) less than the lookback before
    it, and each request reads all of the previous one up to its last mark."""
    entries: set[bytes] = set()
    previous: Sent | None = None
    cache = AnthropicCache()
    for s in sent(requests(steps, CacheRules(), CASES[steps])):
        ids, tokens = prefix_ids(s.blocks), prefix_tokens(s.blocks)
        tally = cache.send(s)
        if previous is not None:
            for j, m in enumerate(s.marks):
                before = [e for e in range(m + 1) if ids[e] in entries or e in s.marks[:j]]
                assert before and m - max(before) < LOOKBACK_BLOCKS, (m, before[-3:])
            assert tally.read == prefix_tokens(previous.blocks)[previous.marks[-1]]
        entries |= {ids[m] for m in s.marks}
        previous = s
        assert tally.total == tokens[-1]


def test_a_fan_out_past_the_lookback_gets_an_intermediate_mark() -> None:
    *earlier, before, last = sent(requests(40, CacheRules(), fan_out_last=12))
    end_before, (system, summary, intermediate, end) = before.marks[-1], last.marks
    assert end - end_before >= LOOKBACK_BLOCKS  # 1 text + 12 calls + 12 results appended
    assert 0 < intermediate - end_before < LOOKBACK_BLOCKS
    assert end - intermediate < LOOKBACK_BLOCKS
    full = prefix_tokens(before.blocks)
    for marks, read in (
        (last.marks, full[end_before]),  # all of the previous request
        ((system, summary, end), full[summary]),  # without it: only up to the summary
    ):
        cache = AnthropicCache()
        for s in [*earlier, before]:
            cache.send(s)
        assert cache.send(Sent(last.blocks, marks, last.at_s)).read == read


def test_a_model_with_a_higher_minimum_gets_no_mark_under_it() -> None:
    # tools+system 1,500 tokens, the summary 1,900, the question 1,940, each step 171.
    sents = sent(requests(15, CacheRules(min_tokens=4_096)))
    for s in sents:
        end = len(s.blocks) - 2  # the plan follows the conversation
        assert s.marks == ((end,) if prefix_tokens(s.blocks)[end] >= 4_096 else ())
    assert [bool(s.marks) for s in sents] == [False] * 13 + [True] * 3


HOUR = {"type": "ephemeral", "ttl": "1h"}
FIVE = {"type": "ephemeral"}


def test_the_cache_lifetime_is_a_profile_setting_rendered_on_the_lasting_marks() -> None:
    # tools+system and the summary (also where the conversation stood when the question
    # came) live an hour; the tool loop's mark keeps the 5-minute default.
    hour = requests(3, CacheRules(ttl="1h"))[-1]
    assert _lifetimes(hour) == [HOUR, HOUR, FIVE]
    assert _lifetimes(requests(3, CacheRules())[-1]) == [FIVE] * 3
    # the next question: where the conversation stood before it lives an hour too
    nxt = [*loop(3)[-1][:-1], msg("assistant", "The flags.", 5), msg("user", "And x86?", 5)]
    body = render(nxt, TOOLS, FMT, cache=CacheRules(ttl="1h"), tools_tokens=TOOLS_TOKENS)
    assert _lifetimes(body) == [HOUR, HOUR, HOUR, FIVE]
    assert [b.get("text") for b in _blocks(body) if "cache_control" in b][2:] == [
        "The flags.",
        "And x86?",
    ]


def test_with_an_hour_a_user_back_after_20_minutes_reads_all_before_the_last_question() -> None:
    first = loop(3)[-1][:-1]  # a question of 3 steps, without the plan
    second = [*first, msg("assistant", "The flags.", 5), msg("user", "And x86?", 5)]
    third = [*second, msg("assistant", "Same.", 5), msg("user", "And riscv?", 5)]
    reads = {}
    for ttl in ("5m", "1h"):
        rules = CacheRules(ttl=ttl)
        cache = AnthropicCache(rules)
        bodies = [
            render(m, TOOLS, FMT, cache=rules, tools_tokens=TOOLS_TOKENS)
            for m in (first, second, third)
        ]
        # each question asked 20 minutes after the previous one
        reads[ttl] = [
            cache.send(sent_request(b, FMT, count, 1_200.0 * i)).read for i, b in enumerate(bodies)
        ]
    conversation = prefix_tokens(sent_request(render(second, TOOLS, FMT), FMT, count).blocks)
    assert reads["5m"] == [0, 0, 0]  # everything expired in between
    # the second question finds the summary's entry; the third the hour's entry written
    # where the conversation stood when the second was asked (its answer: 2 blocks back)
    assert reads["1h"] == [0, 1_900, conversation[-2]]


def _lifetimes(body: dict[str, Any]) -> list[dict[str, str]]:
    return [b["cache_control"] for b in _blocks(body) if "cache_control" in b]


def test_the_profile_holds_the_cache_rules_and_refuses_others() -> None:
    base = {
        "name": "m",
        "context_capacity": 200_000,
        "output_reserve": 8_000,
        "safety_margin": 2_000,
    }
    assert ModelProfile.from_dict(base).cache_rules == CacheRules(1_024, "5m")
    opus = ModelProfile.from_dict(base | {"cache_min_tokens": 4_096, "cache_ttl": "1h"})
    assert opus.cache_rules == CacheRules(4_096, "1h")
    for bad in ({"cache_ttl": "2h"}, {"cache_ttl": 300}, {"cache_min_tokens": -1}):
        with pytest.raises(InvalidPolicy):
            ModelProfile.from_dict(base | bad)


def _blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    out = [*body.get("tools", []), *body.get("system", [])]
    for turn in body["messages"]:
        out += turn["content"]
    return out


def test_tally_adds_up() -> None:
    assert Tally(1, 2, 3) + Tally(4, 5, 6) == Tally(5, 7, 9)


async def test_a_prepare_renders_the_release_profiles_cache_rules() -> None:
    from services.prepare.bodies import PrepareIn, ReleaseIn, SessionIn
    from tests.unit.fakes.prepare import PROFILE, PrepareWorld

    async def request(**cache: Any) -> dict[str, Any]:
        w = PrepareWorld()
        release = {
            "release_id": "rel",
            "agent_id": "a",
            "instructions": "Answer.",
            "model_profile": PROFILE | {"provider_format": FMT} | cache,
        }
        await w.svc.releases.register(ReleaseIn.model_validate(release), "space")
        await w.svc.runs.open_session(SessionIn(session_id="s1", release_id="rel"), "space", "al")
        w.run("s1", "r1")
        w.say("s1", "r1", "user_input", "Why is CI red?")
        out = await w.svc.preparer.prepare("s1", "r1", PrepareIn(purpose="action", render=True))
        body: dict[str, Any] = out.provider.request
        return body

    def marks(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [b["cache_control"] for b in _blocks(body) if "cache_control" in b]

    assert marks(await request()) == []  # a few dozen tokens: under the 1,024 minimum
    hour = marks(await request(cache_min_tokens=0, cache_ttl="1h"))
    assert hour == [HOUR, FIVE]  # system, the question


def test_openai_renders_the_extended_retention_and_each_format_offers_its_lifetimes() -> None:
    from services.model_profiles import model_profile

    day = render(loop(0)[0], TOOLS, "openai_responses", "k", CacheRules(ttl="24h"))
    assert day["prompt_cache_retention"] == "24h"
    assert "prompt_cache_retention" not in render(loop(0)[0], TOOLS, "openai_chat", "k")
    base = {"name": "m", "context_capacity": 200_000, "output_reserve": 0, "safety_margin": 0}
    assert model_profile(base | {"provider_format": "openai_chat", "cache_ttl": "24h"}, None)
    for fmt, ttl in (("anthropic_messages", "24h"), ("openai_chat", "1h")):
        with pytest.raises(InvalidPolicy) as refused:
            model_profile(base | {"provider_format": fmt, "cache_ttl": ttl}, None)
        assert refused.value.details["json_path"] == "model_profile.cache_ttl"


def test_the_intermediate_mark_reaches_back_to_the_previous_end_and_forward_to_the_last() -> None:
    from domain.caching.breakpoints import Anchors, intermediate

    def at(gap: int, markable: Any = lambda _: True) -> int | None:
        return intermediate(Anchors(end=100 + gap, previous_end=100), markable)

    assert at(19) is None  # the last mark's lookback finds the previous end itself
    assert at(25) == 106  # 6 after the previous end, 19 before the last mark
    assert at(50) == 119  # too far for both: the last block that still finds the entry
    assert at(25, lambda q: q != 106) == 107  # an empty block carries no mark
