"""Where a keyed record goes: the worker that is assigned partitions finds its users' trigger states by it."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

from streams.topics import keyed_partition


@given(key=st.binary(min_size=1, max_size=64), partitions=st.integers(1, 1024))
def test_a_key_maps_to_the_partition_the_producers_pick(key: bytes, partitions: int) -> None:
    """The API's producer and the worker's (faust's) send turns and jobs by key with aiokafka's default
    partitioner; a disagreement would make a worker adopt users it does not own."""
    every = list(range(partitions))
    assert keyed_partition(key, partitions) == DefaultPartitioner()(key, every, every)
