from datetime import UTC, datetime, timedelta
from pathlib import Path

from mnemoflow.events import TurnEvent
from mnemoflow.memory.l1.schedule import L1Scheduler
from mnemoflow.memory.l1.state import load_triggers
from mnemoflow.memory.l1.triggers import L1Triggers, TriggerConfig
from mnemoflow.retry import RetryPolicy
from mnemoflow.storage import LocalFileStore

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def turn(i: int, user: str = "u", role: str = "user") -> TurnEvent:
    return TurnEvent(tenant="t", message_id=f"m{i}", user=user, session="s", role=role, content="x", ts=NOW)


def test_warm_up_runs_after_the_first_user_turn_and_state_is_persisted(tmp_path: Path) -> None:
    sched = L1Scheduler(LocalFileStore(tmp_path))
    [job] = sched.on_turns([turn(0), turn(1, role="assistant")], NOW)
    assert (job.kind, job.user, job.reason) == ("run", "u", "threshold")
    assert load_triggers(LocalFileStore(tmp_path), "t", "u").running  # a restarted worker sees it too
    assert sched.on_turns([turn(2)], NOW) == []  # one run in flight per user


def test_success_then_threshold_then_idle_wake_up(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    sched = L1Scheduler(files, L1Triggers(TriggerConfig(every_n=5, warmup=False, idle_s=60)))
    assert sched.on_turns([turn(i) for i in range(4)], NOW) == []
    assert sched.due(NOW + timedelta(seconds=59)) == []
    [idle] = sched.due(NOW + timedelta(seconds=61))
    assert idle.reason == "idle"
    job, dead = sched.on_result("t", "u", NOW + timedelta(seconds=62))
    assert job is None and dead is None and load_triggers(files, "t", "u").pending == 0
    [threshold] = sched.on_turns([turn(10 + i) for i in range(5)], NOW)
    assert threshold.reason == "threshold"


def test_session_end_runs_pending_turns_and_failures_end_in_a_dead_letter(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    sched = L1Scheduler(files, L1Triggers(TriggerConfig(warmup=False, retry=RetryPolicy(attempts=2, base_delay=10))))
    sched.on_turns([turn(0)], NOW)
    job = sched.on_session_end("t", "u", NOW)
    assert job is not None and job.reason == "session_end"
    retry, dead = sched.on_result("t", "u", NOW, error="model down")
    assert retry is None and dead is None
    [again] = sched.due(NOW + timedelta(seconds=11))
    assert again.reason == "retry"
    _, dead = sched.on_result("t", "u", NOW + timedelta(seconds=12), error="model down")
    assert dead == "model down" and load_triggers(files, "t", "u").pending == 1  # parked, not dropped


def test_a_run_marked_by_a_crashed_worker_does_not_block_the_user_forever(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    L1Scheduler(files).on_turns([turn(0)], NOW)  # marks the user running, then "crashes" before the job
    assert load_triggers(files, "t", "u").running
    successor = L1Scheduler(files)  # a new worker owns the user: the run may still be in flight, so it waits
    assert successor.on_turns([turn(1)], NOW) == [] and successor.due(NOW + timedelta(seconds=29)) == []
    [job] = successor.due(NOW + timedelta(seconds=30))  # then retries it (the cursor makes a twice-run harmless)
    assert (job.kind, job.reason) == ("run", "retry")


def test_a_worker_assigned_users_re_derives_their_wake_ups_from_the_files(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    triggers = L1Triggers(TriggerConfig(every_n=5, warmup=False, idle_s=60))
    L1Scheduler(files, triggers).on_turns([turn(0, "idle"), turn(1, "other"), turn(2, "nobody")], NOW)
    successor = L1Scheduler(files, triggers)
    found = successor.scan(lambda tenant, user: user != "nobody")  # "nobody" is in a partition owned elsewhere
    assert sorted(found) == [("t", "idle"), ("t", "other")]
    successor.on_turns([turn(3, "other")], NOW + timedelta(seconds=30))  # loaded since: its own state wins
    assert successor.adopt(found, NOW) == 1
    [idle] = successor.due(NOW + timedelta(seconds=60))
    assert (idle.user, idle.reason) == ("idle", "idle")
    [other] = successor.due(NOW + timedelta(seconds=90))
    assert other.user == "other"


class CountingReads(LocalFileStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads = 0

    def read_bytes(self, path: str) -> bytes | None:
        self.reads += 1
        return super().read_bytes(path)


def test_a_users_trigger_state_is_read_once_then_kept_while_the_worker_owns_the_user(tmp_path: Path) -> None:
    files = CountingReads(tmp_path)
    sched = L1Scheduler(files, L1Triggers(TriggerConfig(warmup=False)))
    for i in range(3):
        sched.on_turns([turn(i)], NOW)
    assert files.reads == 1 and load_triggers(files, "t", "u").pending == 3
    sched.retain(lambda tenant, user: True)  # a rebalance that keeps the user keeps what this worker knew
    sched.on_turns([turn(3)], NOW)
    assert files.reads == 2  # (the load_triggers above was the second)
    sched.flush(NOW)
    sched.retain(lambda tenant, user: False)  # one that moves the user drops it
    sched.on_turns([turn(4)], NOW)
    assert files.reads == 3  # read again when the user comes back


def test_turn_counts_are_checkpointed_and_a_crash_makes_the_trigger_late_not_lost(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    every_5 = L1Triggers(TriggerConfig(every_n=5, warmup=False))
    sched = L1Scheduler(files, every_5, checkpoint_s=1.0)
    sched.on_turns([turn(0)], NOW)  # the first batch of a worker writes: nothing saved yet to compare against
    sched.on_turns([turn(1), turn(2)], NOW + timedelta(seconds=0.5))
    assert load_triggers(files, "t", "u").pending == 1  # counted in memory, not written yet
    sched.on_turns([turn(3, user="v")], NOW + timedelta(seconds=1.0))  # the checkpoint writes every unsaved user
    assert load_triggers(files, "t", "u").pending == 3 and load_triggers(files, "t", "v").pending == 1

    sched.on_turns([turn(4)], NOW + timedelta(seconds=1.2))  # then the worker crashes: this count is lost
    successor = L1Scheduler(files, every_5, checkpoint_s=1.0)
    assert successor.on_turns([turn(5)], NOW + timedelta(seconds=2)) == []  # 4 counted of the 5 said
    [job] = successor.on_turns([turn(6)], NOW + timedelta(seconds=3))  # one turn late; the pass reads all of L0
    assert job.reason == "threshold"


def test_a_revoked_or_stopping_worker_writes_its_unsaved_counts(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    sched = L1Scheduler(files, L1Triggers(TriggerConfig(warmup=False)), checkpoint_s=60.0)
    sched.on_turns([turn(0)], NOW)
    sched.on_turns([turn(1)], NOW + timedelta(seconds=1))
    sched.flush(NOW + timedelta(seconds=2))
    assert load_triggers(files, "t", "u").pending == 2
    sched.on_turns([turn(2, user="v")], NOW + timedelta(seconds=3))
    sched.flush(NOW + timedelta(seconds=4))  # what a revocation does
    assert load_triggers(files, "t", "v").pending == 1


def test_the_wake_up_tick_checkpoints_a_worker_that_gets_no_more_turns(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    sched = L1Scheduler(files, L1Triggers(TriggerConfig(warmup=False, idle_s=600)), checkpoint_s=60.0)
    sched.on_turns([turn(0)], NOW)
    sched.on_turns([turn(1)], NOW + timedelta(seconds=1))
    assert sched.due(NOW + timedelta(seconds=5)) == []
    assert load_triggers(files, "t", "u").pending == 2
