"""The pipe between the faust driver and its processor child (streams.drivers.offload, issue 13):
frames round-trip, and anything that is not a whole reply is a lost worker — never a
reply that could let a batch be acked."""

from __future__ import annotations

import asyncio
import marshal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.settings import Settings
from streams.admission import RawMessage
from streams.drivers.offload import (
    MAX_FRAME,
    Reply,
    WorkerLost,
    decode_batch,
    decode_reply,
    encode_batch,
    encode_reply,
    frame,
    read_frame,
    settings_from,
)
from streams.processor import BatchResult

messages = st.builds(
    RawMessage,
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=200),
    st.integers(0, 1023),
    st.integers(0, 2**62),
)


@given(st.lists(messages, max_size=30))
def test_a_batch_round_trips(batch: list[RawMessage]) -> None:
    assert decode_batch(encode_batch(batch)) == batch


@given(
    st.integers(0, 10**6),
    st.dictionaries(st.text(max_size=20), st.integers(0, 10**6), max_size=5),
    st.dictionaries(st.text(max_size=20), st.integers(1, 10**6), max_size=5),
)
def test_a_reply_round_trips(n: int, codes: dict[str, int], dead: dict[str, int]) -> None:
    reply = Reply(BatchResult(n, n + 1, n + 2, n + 3, n + 4, codes), dead)
    assert decode_reply(encode_reply(reply)) == reply


def _reader(data: bytes) -> asyncio.StreamReader:
    r = asyncio.StreamReader()
    r.feed_data(data)
    r.feed_eof()
    return r


async def test_frames_read_back_in_order_then_a_clean_end() -> None:
    r = _reader(frame(b"one") + frame(b"") + frame(b"three"))
    assert [await read_frame(r) for _ in range(4)] == [b"one", b"", b"three", None]


@pytest.mark.parametrize(
    "data",
    [
        frame(b"whole")[:2],  # the pipe closed inside a header
        frame(b"whole")[:-1],  # ... inside a body
        (MAX_FRAME + 1).to_bytes(8, "big"),  # a length no batch has
    ],
)
async def test_a_torn_or_absurd_frame_is_a_lost_worker(data: bytes) -> None:
    with pytest.raises(WorkerLost):
        await read_frame(_reader(data))


@pytest.mark.parametrize(
    "body",
    [b"", b"\x00garbage", marshal.dumps((1, 2, 3)), marshal.dumps([1, 2, 3, 4, 5, 6, 7])],
)
def test_what_is_no_reply_is_a_lost_worker(body: bytes) -> None:
    with pytest.raises(WorkerLost):
        decode_reply(body)


def test_the_child_gets_the_parents_settings_exactly() -> None:
    s = Settings().model_copy(
        update={"processor_instance_id": "host-processor-7", "processor_batch_max": 123}
    )
    assert settings_from(s.model_dump_json().encode()) == s
