"""The metrics shells: what a batch's outcome counts as, the worker's registry, the LLM usage hook, the timed index."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from actors.metrics import TimedIndex, decisions_since
from mnemoflow.handlers import DeadLetter, JobsOutcome, Outcome, RawRecord, ToolResultsOutcome, TurnsOutcome
from mnemoflow.llm.usage import CallRecord, LLMUsage
from mnemoflow.memory.l1.dedup import DedupStats
from mnemoflow.memory.l1.pipeline import L1RunReply, L1RunResult
from mnemoflow.memory.l1.schedule import L1Job
from mnemoflow.offload.entries import SessionAppend
from streams.metrics import BatchTally, WorkerMetrics, serve_metrics, tally

NOW = datetime(2026, 5, 1, tzinfo=UTC)


def dead(n: int) -> list[DeadLetter]:
    return [DeadLetter.of(RawRecord(b"x", b"k", "mnemoflow.turns", 0, i), "bad", NOW) for i in range(n)]


def test_turns_count_what_the_writer_wrote_and_skipped() -> None:
    assert tally(10, TurnsOutcome(written=6, skipped=3, parked=dead(1))) == BatchTally(6, 3, 1)


def test_tool_results_not_appended_nor_parked_were_skipped() -> None:
    entries = SessionAppend("acme", "s1", new_entries=[object(), object()], last_seq=1)  # type: ignore[list-item]
    assert tally(5, ToolResultsOutcome(appended=[entries], parked=dead(1))) == BatchTally(2, 2, 1)


def test_jobs_and_operations_are_applied_unless_parked_and_never_negative() -> None:
    assert tally(4, Outcome(parked=dead(1))) == BatchTally(3, 0, 1)
    assert tally(1, JobsOutcome(parked=dead(2))) == BatchTally(0, 0, 2)  # a failed pass parks a job it made


def value(metrics: WorkerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_worker_metrics_add_up_batches_jobs_runs_and_lag() -> None:
    metrics = WorkerMetrics()
    metrics.batch("mnemoflow.turns", 10, TurnsOutcome(written=6, skipped=3, parked=dead(1)), 0.2)
    metrics.batch("mnemoflow.turns", 2, TurnsOutcome(written=2), 0.1)
    assert value(metrics, "mnemoflow_worker_events_consumed_total", topic="mnemoflow.turns") == 12
    assert value(metrics, "mnemoflow_worker_events_applied_total", topic="mnemoflow.turns") == 8
    assert value(metrics, "mnemoflow_worker_events_skipped_total", topic="mnemoflow.turns") == 3
    assert value(metrics, "mnemoflow_worker_events_dead_lettered_total", topic="mnemoflow.turns") == 1
    assert value(metrics, "mnemoflow_worker_batch_seconds_count", topic="mnemoflow.turns") == 2
    assert value(metrics, "mnemoflow_worker_batch_seconds_sum", topic="mnemoflow.turns") == pytest.approx(0.3)

    job = L1Job(kind="run", tenant="acme", user="ana", reason="turns", requested_at=NOW)
    ok, failed = L1RunReply(ok=True, result=L1RunResult()), L1RunReply(ok=False, error="boom")
    metrics.produced(JobsOutcome(jobs=[job, job], runs={("acme", "ana"): [ok, failed], ("acme", "bo"): [ok]}))
    assert value(metrics, "mnemoflow_worker_l1_jobs_published_total") == 2
    assert value(metrics, "mnemoflow_worker_l1_runs_total", result="ok") == 2
    assert value(metrics, "mnemoflow_worker_l1_runs_total", result="failed") == 1

    metrics.set_lag({("mnemoflow.turns", 0): 5, ("mnemoflow.turns", 1): 0})
    assert value(metrics, "mnemoflow_worker_consumer_lag", topic="mnemoflow.turns", partition="0") == 5
    metrics.set_lag({("mnemoflow.turns", 1): 7})  # partition 0 went to another worker
    assert value(metrics, "mnemoflow_worker_consumer_lag", topic="mnemoflow.turns", partition="0") is None
    assert value(metrics, "mnemoflow_worker_consumer_lag", topic="mnemoflow.turns", partition="1") == 7


def test_worker_metrics_are_served_on_loopback_and_port_0_serves_nothing() -> None:
    import socket

    import httpx

    metrics = WorkerMetrics()
    metrics.batch("mnemoflow.turns", 3, TurnsOutcome(written=3), 0.01)
    assert serve_metrics(metrics, "127.0.0.1", 0) is None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert serve_metrics(metrics, "127.0.0.1", port) == port
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert 'mnemoflow_worker_events_applied_total{topic="mnemoflow.turns"} 3.0' in text
    assert serve_metrics(metrics, "127.0.0.1", port) is None  # taken: logged, the worker goes on without


def test_llm_usage_tells_its_listener_every_call() -> None:
    seen: list[CallRecord] = []
    usage = LLMUsage(on_record=seen.append)
    call = CallRecord("l1_extract", 120, 30, 0.4, 2, True)
    usage.record(call)
    assert seen == [call] and usage.stage("l1_extract").prompt_tokens == 120


class Index:
    embedding_model = "hashing"

    def search(self, tenant: str, user: str, text: str, vector: list[float], k: int) -> list[str]:
        return [f"{tenant}/{user}/{text}/{k}"]

    def count(self, tenant: str, user: str | None = None) -> int:
        return 7


def test_timed_index_answers_like_the_index() -> None:
    timed = TimedIndex(Index())
    assert timed.search("acme", "ana", "tea", [0.1], k=3) == ["acme/ana/tea/3"]
    assert timed.count("acme") == 7 and timed.embedding_model == "hashing"


def test_dedup_decisions_are_counted_as_the_gain_since_the_last_reading() -> None:
    seen = DedupStats(gated_skip=2, gated_store=1, judged=4)
    now = DedupStats(gated_skip=5, gated_store=1, judged=6, decided_in_extraction=1, judge_calls=9)
    assert decisions_since(seen, now) == {"skip": 3, "store": 0, "judged": 2, "extraction": 1}


def test_a_partition_whose_position_stands_still_behind_waiting_records_is_told_once() -> None:
    from streams.metrics import FetchStalls

    stalls, tp = FetchStalls(stall_s=30), ("mnemoflow.turns", 3)
    assert stalls.observe({tp: (100, 5)}, 0) == []
    assert stalls.observe({tp: (100, 5)}, 29) == []
    [said] = stalls.observe({tp: (100, 7)}, 31)
    assert said == "mnemoflow.turns[3]: 7 records past position 100, which has not moved for 31 s"
    assert stalls.observe({tp: (100, 7)}, 60) == []  # once per stall
    assert stalls.observe({tp: (140, 0)}, 65) == []  # caught up
    assert stalls.observe({tp: (150, 2)}, 70) == [] and stalls.observe({tp: (151, 2)}, 200) == []  # moving
