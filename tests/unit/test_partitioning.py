"""The cached partitioner maps keys exactly like Kafka's default (murmur2): the single
writer per session depends on every producer agreeing where a session lives."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

from streams.kafka.partitioning import cached_partitioner


@given(key=st.binary(min_size=0, max_size=64), count=st.integers(min_value=1, max_value=64))
def test_same_partition_as_kafkas_default(key: bytes, count: int) -> None:
    partitions = list(range(count))
    assert cached_partitioner(key, partitions, partitions) == DefaultPartitioner()(
        key, partitions, partitions
    )


def test_keyless_message_goes_to_an_available_partition() -> None:
    assert cached_partitioner(None, [0, 1, 2], [2]) == 2
