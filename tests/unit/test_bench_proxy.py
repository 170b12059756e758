"""bench/proxy.py measures what it says: 20-message valid requests that end on a user turn, honest percentiles."""

import pytest

from mnemoflow.offload.messages import validate

proxy_bench = pytest.importorskip("bench.proxy")


def test_the_latency_workload_is_twenty_valid_messages_ending_on_a_user_turn() -> None:
    if not (proxy_bench.EVAL / "trajectories" / "tau_bench_airline").exists():
        pytest.skip("eval trajectories not found")
    requests = proxy_bench.twenty_message_requests(5)
    assert len(requests) == 5 and len({id(r) for r in requests}) == 5
    for messages in requests:
        assert len(messages) == 20 and messages[-1]["role"] == "user"
        validate(messages)  # no orphaned tool call or result


def test_percentiles_are_taken_from_the_samples() -> None:
    values = [float(v) for v in range(1, 101)]
    assert proxy_bench.pct(values, 0.5) == 51.0 and proxy_bench.pct(values, 0.99) == 99.0
    assert proxy_bench.pct([3.0], 0.99) == 3.0
