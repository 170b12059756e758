"""The stream handlers driven inline: temporary-directory files, a manual clock, a sleep that only advances it.

The Faust wiring (``streams/app.py``) only converts records and produces what an outcome lists; everything
decided per record is checked here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from pydantic import BaseModel

from mnemoflow.config import TOPIC_DEAD_LETTERS, TOPIC_JOBS, TOPIC_TOOL_RESULTS, TOPIC_TURNS
from mnemoflow.errors import StorageError
from mnemoflow.events import ToolResultEvent, TurnEvent
from mnemoflow.handlers import (
    HandlerContext,
    JobsOutcome,
    L1JobsHandler,
    RawRecord,
    ToolResultsHandler,
    TurnsHandler,
    WriterThread,
)
from mnemoflow.memory.l0 import read_l0
from mnemoflow.memory.l1.pipeline import L1RunReply, L1RunResult
from mnemoflow.memory.l1.schedule import L1Job, L1Scheduler
from mnemoflow.memory.l1.state import load_triggers
from mnemoflow.memory.l1.triggers import L1Triggers, TriggerConfig
from mnemoflow.offload.entries import SessionAppend, read_entries, read_ref
from mnemoflow.retry import RetryPolicy
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock

T = TypeVar("T")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Flaky(LocalFileStore):
    """Appends fail ``failures`` times, then work; records the thread every append ran on."""

    def __init__(self, root: Path, failures: int = 0) -> None:
        super().__init__(root)
        self.failures = failures
        self.threads: list[str] = []

    def append_lines(self, path: str, lines: list[str]) -> None:
        self.threads.append(threading.current_thread().name)
        if self.failures:
            self.failures -= 1
            raise StorageError("disk hiccup")
        super().append_lines(path, lines)


class Setup:
    def __init__(self, tmp_path: Path, failures: int = 0, attempts: int = 3) -> None:
        self.clock = ManualClock(T0)
        self.files = Flaky(tmp_path, failures)
        self.slept: list[float] = []
        policy = RetryPolicy(attempts=attempts, base_delay=0.5)
        self.ctx = HandlerContext(self.clock, policy, WriterThread(), self.sleep)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock.advance(seconds)


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


def record(event: BaseModel | bytes, offset: int, topic: str = TOPIC_TURNS) -> RawRecord:
    value = event if isinstance(event, bytes) else event.model_dump_json().encode()
    return RawRecord(value, b"t/key", topic, 3, offset)


def turn(i: int, user: str = "ana", role: str = "user") -> TurnEvent:
    return TurnEvent(tenant="t", message_id=f"m{i}", user=user, session="s", role=role, content=f"hi {i}", ts=T0)


def result(i: int, session: str = "s1") -> ToolResultEvent:
    return ToolResultEvent(
        tenant="t", session=session, tool_call_id=f"c{i}", tool_name="bash", arguments="{}", content=f"out {i}\n", ts=T0
    )


def test_turns_are_written_and_bad_records_parked_with_origin_bytes_and_reason(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    handler = TurnsHandler(s.ctx, s.files)
    bad = b'{"tenant": "t", "role": "robot"}'
    out = run(handler.handle([record(turn(0), 10), record(bad, 11), record(turn(1), 12)]))
    assert (out.written, out.skipped, out.jobs) == (2, 0, [])
    assert [m.id for m in read_l0(s.files, "t", "ana")] == ["m0", "m1"]
    [dead] = out.parked
    assert (dead.topic, dead.partition, dead.offset, dead.key) == (TOPIC_TURNS, 3, 11, "t/key")
    assert dead.value == bad and dead.reason.startswith("invalid turn event: ") and dead.parked_at == T0
    [message] = out.messages()
    assert (message.topic, message.key) == (TOPIC_DEAD_LETTERS, b"t/key")
    assert json.loads(message.value)["reason"] == dead.reason


def test_a_replayed_batch_writes_nothing_twice(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    records = [record(turn(i), i) for i in range(4)]
    run(TurnsHandler(s.ctx, s.files).handle(records[:2]))
    out = run(TurnsHandler(s.ctx, s.files).handle(records))  # a restarted worker: the files are the truth
    assert (out.written, out.skipped) == (2, 2)


def test_file_work_runs_on_the_writer_thread_not_the_event_loop(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    run(TurnsHandler(s.ctx, s.files).handle([record(turn(0), 0)]))
    assert s.files.threads and all(name.startswith("mnemoflow-writer") for name in s.files.threads)


def test_a_failing_write_is_retried_with_backoff_then_succeeds(tmp_path: Path) -> None:
    s = Setup(tmp_path, failures=2)
    out = run(TurnsHandler(s.ctx, s.files).handle([record(turn(0), 0), record(turn(1), 1)]))
    assert s.slept == [0.5, 1.0] and (out.written, out.parked) == (2, [])
    assert [m.id for m in read_l0(s.files, "t", "ana")] == ["m0", "m1"]


def test_a_write_that_keeps_failing_parks_every_parsed_record_with_the_last_error(tmp_path: Path) -> None:
    s = Setup(tmp_path, failures=99, attempts=3)
    out = run(TurnsHandler(s.ctx, s.files).handle([record(turn(0), 5), record(b"{}", 6), record(turn(1), 7)]))
    assert s.slept == [0.5, 1.0] and out.written == 0
    assert [d.offset for d in out.parked] == [6, 5, 7]
    assert out.parked[1].reason == "write turn failed after 3 tries: disk hiccup"
    assert out.parked[1].parked_at == T0.replace(second=1, microsecond=500_000)  # the clock the sleeps moved


def test_new_turns_make_l1_runs_due_and_they_are_published_as_jobs(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    handler = TurnsHandler(s.ctx, s.files, L1Scheduler(s.files))
    out = run(handler.handle([record(turn(0), 0), record(turn(1, role="assistant"), 1), record(turn(2, "bo"), 2)]))
    assert sorted((j.user, j.kind, j.reason, j.requested_at) for j in out.jobs) == [
        ("ana", "run", "threshold", T0),
        ("bo", "run", "threshold", T0),
    ]
    messages = out.messages()
    assert {(m.topic, m.key) for m in messages} == {(TOPIC_JOBS, b"t/ana"), (TOPIC_JOBS, b"t/bo")}
    assert load_triggers(s.files, "t", "ana").running


class BrokenScheduler(L1Scheduler):
    def on_turns(self, events: object, now: datetime) -> list[L1Job]:
        raise StorageError("triggers unreadable")


def test_a_scheduling_failure_is_logged_and_the_turns_stay_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = Setup(tmp_path)
    with caplog.at_level(logging.WARNING, "mnemoflow.handlers"):
        out = run(TurnsHandler(s.ctx, s.files, BrokenScheduler(s.files)).handle([record(turn(0), 0)]))
    assert (out.written, out.jobs, out.parked) == (1, [], [])
    assert "L1 triggers not updated for 1 turns: triggers unreadable" in caplog.text


def test_tool_results_are_stored_and_the_shards_told_what_was_added(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    told: list[list[SessionAppend]] = []

    async def notify(appended: list[SessionAppend]) -> None:
        told.append(appended)

    handler = ToolResultsHandler(s.ctx, s.files, notify)
    records = [
        record(result(0), 0, TOPIC_TOOL_RESULTS),
        record(b"not json", 1, TOPIC_TOOL_RESULTS),
        record(result(1, "s2"), 2, TOPIC_TOOL_RESULTS),
    ]
    out = run(handler.handle(records))
    assert [(a.session, [e.tool_call_id for e in a.new_entries], a.last_seq) for a in out.appended] == [
        ("s1", ["c0"], 0),
        ("s2", ["c1"], 0),
    ]
    assert told == [out.appended]
    assert [d.reason.split(":")[0] for d in out.parked] == ["invalid tool-result event"]
    assert read_ref(s.files, "t", "s2", "c1") == b"out 1\n" and len(read_entries(s.files, "t", "s1")) == 1


def test_the_first_tool_result_naming_an_agent_makes_it_the_sessions_owner(tmp_path: Path) -> None:
    from mnemoflow.offload.owner import SessionOwner, owner_of

    s = Setup(tmp_path)
    named = result(1, "s2").model_copy(update={"agent": "coder", "team": "eng"})
    run(ToolResultsHandler(s.ctx, s.files).handle([record(result(0), 0, TOPIC_TOOL_RESULTS)]))
    run(ToolResultsHandler(s.ctx, s.files).handle([record(named, 1, TOPIC_TOOL_RESULTS)]))
    assert owner_of(s.files, "t", "s1") is None  # the default agent's session: no owner
    assert owner_of(s.files, "t", "s2") == SessionOwner(agent="coder", team="eng")


def test_a_failed_notification_is_logged_not_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = Setup(tmp_path)

    async def notify(appended: list[SessionAppend]) -> None:
        raise ConnectionError("shard 2 is restarting")

    with caplog.at_level(logging.WARNING, "mnemoflow.handlers"):
        out = run(ToolResultsHandler(s.ctx, s.files, notify).handle([record(result(0), 0, TOPIC_TOOL_RESULTS)]))
    assert len(out.appended) == 1 and out.parked == [] and s.slept == []
    assert "session shards not notified (1 sessions): shard 2 is restarting" in caplog.text


def job(user: str = "ana", kind: str = "run") -> L1Job:
    return L1Job(kind=kind, tenant="t", user=user, reason="threshold", requested_at=T0)  # type: ignore[arg-type]


Runner = Callable[[str, str], Awaitable[L1RunReply]]


class Jobs:
    """A jobs handler with a scheduler of its own; what its passes report, and whom the curator was told of."""

    def __init__(self, s: Setup, runner: Runner | None, attempts: int = 2, timeout_s: float = 900.0) -> None:
        retry = RetryPolicy(attempts=attempts, base_delay=30, max_delay=600)
        self.scheduler = L1Scheduler(s.files, L1Triggers(TriggerConfig(warmup=False, every_n=1, retry=retry)))
        self.done: list[tuple[str, str]] = []
        self.reports: list[JobsOutcome] = []
        self.handler = L1JobsHandler(
            s.ctx, self.scheduler, runner, self._done, report=self.report, pass_timeout_s=timeout_s
        )

    async def _done(self, tenant: str, user: str) -> None:
        self.done.append((tenant, user))

    async def report(self, outcome: JobsOutcome) -> None:
        self.reports.append(outcome)

    async def handled(self, records: list[RawRecord]) -> JobsOutcome:
        """The batch's outcome, after every pass it started was settled and reported."""
        out = await self.handler.handle(records)
        await self.handler.drain()
        return out

    def replies(self, user: str = "ana") -> list[L1RunReply]:
        return [reply for outcome in self.reports for reply in outcome.runs.get(("t", user), [])]


def test_jobs_without_an_extractor_are_parked_saying_so(tmp_path: Path) -> None:
    jobs = Jobs(Setup(tmp_path), None)
    out = run(jobs.handled([record(job(), 0, TOPIC_JOBS)]))
    assert [(d.offset, d.reason) for d in out.parked] == [(0, "no extractor is wired to this worker")]


def test_a_successful_run_is_reported_and_the_curator_told(tmp_path: Path) -> None:
    async def runner(tenant: str, user: str) -> L1RunReply:
        return L1RunReply(ok=True, result=L1RunResult(stored=3))

    jobs = Jobs(Setup(tmp_path), runner)
    records = [record(job(), 0, TOPIC_JOBS), record(job(), 1, TOPIC_JOBS), record(b"[]", 2, TOPIC_JOBS)]
    out = run(jobs.handled(records))
    assert [r.result.stored for r in jobs.replies() if r.result] == [3]  # one run per user and batch
    assert jobs.done == [("t", "ana")] and [d.offset for d in out.parked] == [2]


def test_failed_runs_are_retried_by_the_trigger_policy_then_parked_with_the_reason(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    replies = [L1RunReply(ok=False, error="model down"), ConnectionError("extractor gone")]

    async def runner(tenant: str, user: str) -> L1RunReply:
        reply = replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    jobs = Jobs(s, runner, attempts=2)
    out = run(jobs.handled([record(job(), 0, TOPIC_JOBS)]))
    assert out.parked == [] and [r.error for r in jobs.replies()] == ["model down"]
    assert run(jobs.handler.tick()).jobs == []  # the retry waits for its backoff
    s.clock.advance(30)
    [retry] = run(jobs.handler.tick()).jobs
    assert (retry.reason, retry.requested_at) == ("retry", s.clock.now())
    assert run(jobs.handled([record(retry, 1, TOPIC_JOBS)])).parked == []
    [dead] = jobs.reports[-1].parked  # parked by the pass, when it ended: the job record was acknowledged before
    assert dead.reason == "L1 gave up: ConnectionError: extractor gone" and dead.key == "t/ana"
    assert L1Job.model_validate_json(dead.value) == retry and jobs.done == []
    assert [m.topic for m in jobs.reports[-1].messages()] == [TOPIC_DEAD_LETTERS]


def test_a_job_is_acknowledged_once_its_run_is_recorded_not_when_the_pass_ends(tmp_path: Path) -> None:
    """A pass that hangs does not hold the batch (a rebalance waits for every record in flight); it is bounded
    by the pass timeout and then retried like any failed pass."""
    s = Setup(tmp_path)
    release = asyncio.Event()

    async def runner(tenant: str, user: str) -> L1RunReply:
        await release.wait()
        return L1RunReply(ok=True, result=L1RunResult(stored=1))

    jobs = Jobs(s, runner, timeout_s=0.2)

    async def scenario() -> None:
        turns = TurnsHandler(s.ctx, s.files, jobs.scheduler)
        [started] = (await turns.handle([record(turn(0), 0)])).jobs
        out = await asyncio.wait_for(jobs.handler.handle([record(started, 0, TOPIC_JOBS)]), 5)
        assert out.parked == [] and jobs.reports == []  # acknowledged with the pass still in flight
        assert load_triggers(s.files, "t", "ana").running  # the run is recorded for whoever owns the user next
        await jobs.handler.drain()

    run(scenario())
    [reply] = jobs.replies()
    assert reply.error == "no reply from the extractor within 0.2 s"
    assert load_triggers(s.files, "t", "ana").retry_at == T0 + timedelta(seconds=30)


def test_a_run_started_while_the_last_pass_is_still_being_reported_is_not_taken_for_a_duplicate(
    tmp_path: Path,
) -> None:
    """Once a pass is settled in the trigger state, the next job for the user is a new run, even while the
    settled pass still tells the curator and produces its report."""
    s = Setup(tmp_path)
    reported = asyncio.Event()
    ran: list[str] = []

    async def runner(tenant: str, user: str) -> L1RunReply:
        ran.append(user)
        return L1RunReply(ok=True, result=L1RunResult(stored=1))

    jobs = Jobs(s, runner)

    async def slow_report(outcome: JobsOutcome) -> None:
        jobs.reports.append(outcome)
        await reported.wait()

    jobs.handler = L1JobsHandler(s.ctx, jobs.scheduler, runner, report=slow_report)

    async def scenario() -> None:
        turns = TurnsHandler(s.ctx, s.files, jobs.scheduler)
        [first] = (await turns.handle([record(turn(0), 0)])).jobs
        await jobs.handler.handle([record(first, 0, TOPIC_JOBS)])
        while not jobs.reports:  # settled, and stuck producing its report
            await asyncio.sleep(0.01)
        [second] = (await turns.handle([record(turn(1), 1)])).jobs
        await jobs.handler.handle([record(second, 1, TOPIC_JOBS)])
        reported.set()
        await jobs.handler.drain()

    run(scenario())
    assert ran == ["ana", "ana"] and len(jobs.reports) == 2
    assert not load_triggers(s.files, "t", "ana").running


def test_a_worker_keeps_a_bounded_number_of_passes_at_the_extractor(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    running, most = 0, 0

    async def runner(tenant: str, user: str) -> L1RunReply:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        return L1RunReply(ok=True, result=L1RunResult(stored=1))

    jobs = Jobs(s, runner)
    jobs.handler = L1JobsHandler(s.ctx, jobs.scheduler, runner, report=jobs.report, max_passes=2)
    run(jobs.handled([record(job(f"u{i}"), i, TOPIC_JOBS) for i in range(6)]))
    assert most == 2 and sum(len(r.runs) for r in jobs.reports) == 6


def test_a_revoked_worker_leaves_its_passes_to_the_next_owner_which_retries_them(tmp_path: Path) -> None:
    """A pass in flight for a user a rebalance moves is not settled by the old owner; the worker assigned the user next
    finds the run in the trigger state and retries it after the first retry delay, and re-derives the idle
    wake-up of a user nobody would otherwise extract until their next turn."""
    s = Setup(tmp_path)
    release = asyncio.Event()
    ran: list[str] = []

    async def runner(tenant: str, user: str) -> L1RunReply:
        ran.append(user)
        if user == "ana" and len(ran) == 1:
            await release.wait()
        return L1RunReply(ok=True, result=L1RunResult(stored=1))

    old, new = Jobs(s, runner), Jobs(s, runner)

    async def scenario() -> None:
        turns = TurnsHandler(s.ctx, s.files, old.scheduler)
        [started] = (await turns.handle([record(turn(0), 0)])).jobs
        await old.handler.handle([record(started, 0, TOPIC_JOBS)])
        old.scheduler.triggers = L1Triggers(TriggerConfig(every_n=5, warmup=False))  # bo's turn starts no run
        assert (await turns.handle([record(turn(1, "bo"), 1)])).jobs == []
        await old.handler.forget()  # a revocation: the pass that ends now waits for the assignment
        release.set()
        await asyncio.sleep(0.05)
        assert old.reports == []
        await old.handler.adopt(lambda tenant, user: False)  # which gives ana and bo to another worker
        await asyncio.sleep(0.05)
        assert old.reports == []  # the old owner settled nothing
        assert await new.handler.adopt(lambda tenant, user: user != "nobody") == 2
        assert (await new.handler.tick()).jobs == []
        s.clock.advance(30)  # the first retry delay: ana's run again
        [retry] = (await new.handler.tick()).jobs
        assert (retry.user, retry.reason) == ("ana", "retry")
        await new.handled([record(retry, 1, TOPIC_JOBS)])
        s.clock.advance(600)  # bo's idle wake-up
        [idle] = (await new.handler.tick()).jobs
        assert (idle.user, idle.reason) == ("bo", "idle")

    run(scenario())
    assert ran == ["ana", "ana"] and [r.ok for r in new.replies()] == [True]
    assert not load_triggers(s.files, "t", "ana").running


def test_a_pass_in_flight_across_a_rebalance_that_keeps_its_user_settles_as_usual(tmp_path: Path) -> None:
    """No second pass for a user who stayed: the old pass's result is recorded once the assignment is known."""
    s = Setup(tmp_path)
    release = asyncio.Event()
    ran: list[str] = []

    async def runner(tenant: str, user: str) -> L1RunReply:
        ran.append(user)
        await release.wait()
        return L1RunReply(ok=True, result=L1RunResult(stored=1))

    jobs = Jobs(s, runner)

    async def scenario() -> None:
        turns = TurnsHandler(s.ctx, s.files, jobs.scheduler)
        [started] = (await turns.handle([record(turn(0), 0)])).jobs
        await jobs.handler.handle([record(started, 0, TOPIC_JOBS)])
        await jobs.handler.forget()
        release.set()
        await asyncio.sleep(0.05)
        assert jobs.reports == [] and load_triggers(s.files, "t", "ana").running  # waiting for the assignment
        assert await jobs.handler.adopt(lambda tenant, user: True) == 0  # ana stays, her run is known here
        await jobs.handler.drain()
        s.clock.advance(600)
        assert (await jobs.handler.tick()).jobs == []  # no retry of a pass that was settled

    run(scenario())
    assert ran == ["ana"] and [r.ok for r in jobs.replies()] == [True]
    assert not load_triggers(s.files, "t", "ana").running


class UnsavableScheduler(L1Scheduler):
    def due(self, now: datetime) -> list[L1Job]:
        raise StorageError("disk full")


def test_a_tick_that_cannot_save_retries_then_leaves_the_wake_ups_for_the_next_tick(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = Setup(tmp_path)
    handler = L1JobsHandler(s.ctx, UnsavableScheduler(s.files), None)
    with caplog.at_level(logging.ERROR, "mnemoflow.handlers"):
        out = run(handler.tick())
    assert (out.jobs, out.parked, s.slept) == ([], [], [0.5, 1.0])
    assert "fire L1 wake-ups failed after 3 tries: disk full" in caplog.text
