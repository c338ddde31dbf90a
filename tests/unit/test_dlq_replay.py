"""Issue 25 finding 8: what ``dlq replay`` accepts as the original of a letter — pure parts
(the real-stack test is tests/integration/test_dlq_replay.py)."""

from __future__ import annotations

import dataclasses

import pytest

from schemas.contracts import RecordKind
from schemas.wire import (
    BudgetObservation,
    ControlEvent,
    DeadLetter,
    encode_control,
    encode_event,
    fit_dead_letter,
)
from services.cli.dlq_cmd import _refs
from services.cli.dlq_replay import Original, mismatch
from services.cli.dlq_verdict import APPLY, IGNORE, REFUSE, forecast, read_back, replayable
from storage.dlq_replays import Known

from .factories import make_event

ORIGINAL = Original(b"ses-1", b"\x00event-bytes", (("alc-sig", b"ab"),))


def letter(key: bytes | None, value: bytes | None) -> DeadLetter:
    return DeadLetter("invalid_event", "bad", "ctx.records", 0, 7, key, value, "ses-1", "k", 1)


@pytest.mark.spec("R15.3")
def test_a_letter_is_the_original_only_byte_for_byte() -> None:
    assert mismatch(letter(b"ses-1", b"\x00event-bytes"), ORIGINAL) is None
    assert "value" in (mismatch(letter(b"ses-1", b"\x00forged"), ORIGINAL) or "")
    assert "key" in (mismatch(letter(b"ses-2", b"\x00event-bytes"), ORIGINAL) or "")


@pytest.mark.spec("R15.3")
def test_a_cut_letter_matches_by_its_recorded_size_and_sha256() -> None:
    big = Original(b"ses-1", b"x" * 5000)
    cut = fit_dead_letter(letter(big.key, big.value), max_bytes=1200)
    assert cut.value is not None and len(cut.value) < 5000
    assert mismatch(cut, big) is None
    assert mismatch(cut, Original(b"ses-1", b"x" * 4999 + b"y")) is not None
    forged = DeadLetter(**{**cut.__dict__, "value": b"y" + (cut.value or b"")[1:]})
    assert mismatch(forged, big) is not None  # the kept prefix is not the original's


def test_several_letters_of_one_partition_are_all_named() -> None:
    assert _refs(["1:4", "1:9", "0:2", "1:4"]) == {1: [4, 9], 0: [2]}


# --- what the processor will do with an original, and did (services/cli/dlq_verdict.py)

EVENT = make_event(RecordKind.USER_INPUT, "q1", session="ses-1")
SIGNED = (("alc-signer", b"key:" + b"0" * 16), ("alc-sig", b"a" * 64))
FRESH = Known(("space-1", "actor-1"), None, None, None)


@pytest.mark.spec("R15.3")
def test_only_a_valid_context_event_with_an_envelope_on_its_sessions_key_is_replayable() -> None:
    value = encode_event(EVENT)
    assert replayable(b"ses-1", value, SIGNED).event == EVENT
    assert replayable(b"ses-1", value, ()).code == "envelope_invalid"
    assert replayable(b"ses-2", value, SIGNED).code == "key_mismatch"
    control = ControlEvent("obs", "ses-1", "run-1", "main", 1, BudgetObservation(
        1, 10, 0, 0, 0, 0, None, "fp", "pol-1"))  # fmt: skip
    got = replayable(b"ses-1", encode_control(control), SIGNED)
    assert (got.event, got.code) == (None, "not_a_context_event")
    assert replayable(b"ses-1", b"\x00junk", SIGNED).code == "bad_header"
    bad_key = encode_event(dataclasses.replace(EVENT, event_key="k\x01"))
    assert replayable(b"ses-1", bad_key, SIGNED).code == "bad_event_key"


@pytest.mark.spec("R15.3", "R3.1")
def test_the_forecast_says_apply_or_ignore_and_why() -> None:
    assert forecast(EVENT, FRESH).expect == APPLY
    dup = forecast(EVENT, dataclasses.replace(FRESH, record=("rec_1", 4)))
    assert (dup.expect, dup.code) == (IGNORE, "duplicate") and "rec_1" in dup.why
    op = forecast(EVENT, dataclasses.replace(FRESH, operation_record="rec_2"))
    assert (op.expect, op.code) == (IGNORE, "duplicate")
    refused = forecast(EVENT, dataclasses.replace(FRESH, refusal=("run_not_active", "ended")))
    assert (refused.expect, refused.code) == (IGNORE, "refused_key")
    assert "stays refused" in refused.why
    # An authentication refusal binds nothing: the genuine original still applies.
    unauth = dataclasses.replace(FRESH, refusal=("unauthenticated_event", "user key"))
    assert forecast(EVENT, unauth).expect == APPLY
    gone = forecast(EVENT, dataclasses.replace(FRESH, session=None))
    assert (gone.expect, gone.code) == (REFUSE, "unknown_session")
    other = forecast(EVENT, dataclasses.replace(FRESH, session=("space-2", "actor-1")))
    assert (other.expect, other.code) == (REFUSE, "scope_mismatch")


def test_the_read_back_names_the_record_the_refusal_or_neither() -> None:
    assert read_back(dataclasses.replace(FRESH, record=("rec_9", 1))) == (
        None,
        "applied: committed as rec_9",
    )
    code, what = read_back(dataclasses.replace(FRESH, refusal=("blob_missing", "no blob")))
    assert code == "blob_missing" and what.startswith("refused again")
    assert read_back(FRESH)[0] == "not_applied"
