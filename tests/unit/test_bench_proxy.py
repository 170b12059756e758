"""bench/proxy.py measures what it says: 20-message valid requests that end on a user turn, honest percentiles."""

from pathlib import Path

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


def test_server_timing_is_read_as_the_proxy_writes_it() -> None:
    from bench.stages import parse_server_timing
    from mnemoflow.proxy.pipeline import server_timing

    written = server_timing({"recall": 12.34, "compact_shard": 4.0, "total": 60.0})
    assert parse_server_timing(written) == {"recall": 12.3, "compact_shard": 4.0, "total": 60.0}
    assert parse_server_timing('db;dur=5, cache;desc="hit", db;dur=9') == {"db": 5.0}  # the first of a name


def test_the_stage_table_says_how_each_stage_is_measured_and_how_many_went_through_it() -> None:
    from bench.stages import StageTimes

    stages = StageTimes({"end_to_end": "client", "serve_hop": "derived: end_to_end less total", "embed": "replica"})
    for k in range(4):
        stages.request("first")
        stages.add_all("first", {"end_to_end": 10.0 + k, "serve_hop": 2.0})
        if k == 0:
            stages.add("first", "embed", 5.0)
    table = stages.table("t", {"first": "first request", "repeat": "same array again"})
    assert table.columns == [
        "stage",
        "how it is measured",
        "first request p50 / p99 ms",
        "same array again p50 / p99 ms",
    ]
    assert table.rows == [
        ["end_to_end", "client", "12.0 / 13.0", ""],
        ["serve_hop", "derived: end_to_end less total", "2.0 / 2.0", ""],
        ["embed", "replica", "5.0 / 5.0 (1 of 4)", ""],
    ]
    result = stages.result(["first"])
    assert result["by_kind"]["first"]["stages_ms"]["embed"] == {"p50": 5.0, "p99": 5.0, "n": 1}
    assert result["by_kind"]["first"]["requests"] == 4 and set(result["how"]) == {"end_to_end", "serve_hop", "embed"}


def test_a_result_goes_to_out_else_the_temp_folder_for_a_smoke_run_else_bench_results(tmp_path: Path) -> None:
    from bench.report import RESULTS, result_path

    assert result_path("proxy", str(tmp_path / "x.json"), smoke=True) == tmp_path / "x.json"
    smoke = result_path("proxy", None, smoke=True, quick=True)
    assert RESULTS not in smoke.parents and smoke.name == "mnemoflow-bench-proxy-smoke.json"
    assert result_path("proxy", None, quick=True) == RESULTS / "proxy-quick.json"
    assert result_path("model_engine-qwen2.5-0.5b") == RESULTS / "model_engine-qwen2.5-0.5b.json"
