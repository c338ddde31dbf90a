"""The stored view of a call (issue 28 item 4): each block with the role it was sent
with, in every provider format (``domain.context.sent_view`` against
``domain.context.providers``)."""

from __future__ import annotations

import pytest

from domain.context.providers import render
from domain.context.sent_view import Source, pack, sent_roles, sent_view, unpack

pytestmark = pytest.mark.spec("R18", "R4.2")

MESSAGES = [
    {"role": "system", "content": "Be brief.", "block": "instruction", "block_id": "instr"},
    {
        "role": "system",  # asked for system; a summary may not instruct (R3.3)
        "content": "[history summary s1] earlier",
        "block": "summary",
        "summary_id": "s1",
        "block_id": "summary:s1",
        "category": "summary",
        "record_ids": [],
    },
    {"role": "user", "content": "Question?", "block_id": "rec:r2", "record_ids": ["r2"]},
    {"role": "assistant", "content": "Answer.", "block_id": "rec:r3", "record_ids": ["r3"]},
]


def test_roles_are_the_ones_in_the_request_in_every_format() -> None:
    chat = render(MESSAGES, [], "openai_chat")
    assert sent_roles(MESSAGES, chat, "openai_chat") == [m["role"] for m in chat["messages"]]
    assert sent_roles(MESSAGES, chat, "openai_chat")[1] == "user"
    responses = render(MESSAGES, [], "openai_responses")
    assert sent_roles(MESSAGES, responses, "openai_responses") == [
        "instructions",
        *(i["role"] for i in responses["input"]),
    ]
    anthropic = render(MESSAGES, [], "anthropic_messages")
    assert [b["text"] for b in anthropic["system"]] == ["Be brief."]
    assert sent_roles(MESSAGES, anthropic, "anthropic_messages") == [
        "system",
        "user",
        "user",
        "assistant",
    ]


def test_the_document_lists_covered_records_after_the_summary_and_packs_small() -> None:
    sources = {"r1": Source("r1", "tool_outcome", 1, 900), "r2": Source("r2", "user_input", 2, 5)}
    view = sent_view(
        MESSAGES, render(MESSAGES, [], "openai_chat"), "openai_chat", "sha", ("s1", 1), sources,
        ["r1"],
    )  # fmt: skip
    ids = [b["block_id"] for b in view["blocks"]]
    assert ids == ["instr", "summary:s1", "rec:r1", "rec:r2", "rec:r3"]
    covered = view["blocks"][2]
    assert (covered["role"], covered["decision"], covered["kind"]) == (
        None,
        "summarized",
        "tool_outcome",
    )
    assert (view["summary_id"], view["summary_version"]) == ("s1", 1)
    assert unpack(pack(view)) == view
    big = sent_view(MESSAGES * 200, None, "openai_chat", "sha")
    assert len(pack(big)) < len(str(big)) / 10


def test_a_stored_view_notes_what_changed_since_and_is_not_rebuilt() -> None:
    from domain.context.call_view import call_view, stored_view
    from tests.unit.test_call_view import facts

    rebuilt = call_view(facts())
    assert rebuilt.rebuilt
    doc = sent_view(MESSAGES, render(MESSAGES, [], "openai_chat"), "openai_chat", "sha9")
    view = stored_view(rebuilt, doc, retracted={"r3"}, revoked={"r2"})
    assert not view.rebuilt and view.request_sha256 == "sha9"
    assert [(b.block_id, b.role) for b in view.blocks] == [
        ("instr", "system"),
        ("summary:s1", "user"),
        ("rec:r2", "user"),
        ("rec:r3", "assistant"),
    ]
    assert [(b.retracted_since, b.revoked_since) for b in view.blocks[2:]] == [
        (False, True),
        (True, False),
    ]
    assert doc == sent_view(MESSAGES, render(MESSAGES, [], "openai_chat"), "openai_chat", "sha9")


def test_messages_a_model_hook_added_or_removed_are_shown_as_sent() -> None:
    request = render(MESSAGES, [], "openai_chat")
    hook_note = {"role": "system", "content": "Hook: answer in French."}
    later = {"role": "user", "content": "Hook: the time is 12:00."}
    request["messages"] = [*request["messages"][:2], hook_note, request["messages"][3], later]
    view = sent_view(MESSAGES, request, "openai_chat", "sha")
    rows = [(b["block_id"], b["role"], b["decision"], b["reason"]) for b in view["blocks"]]
    assert rows[2:] == [
        ("rec:r2", None, "dropped", "removed_by_hook"),
        ("hook:2", "system", "kept", "added_by_hook"),
        ("rec:r3", "assistant", "kept", "in_thread"),
        ("hook:4", "user", "kept", "added_by_hook"),
    ]
    assert [r for _, r, _, _ in rows if r] == [m["role"] for m in request["messages"]]
