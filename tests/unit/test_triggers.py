from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemoflow.memory.l1.triggers import Decision, L1Triggers, TriggerConfig, TriggerState
from mnemoflow.retry import RetryPolicy

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def drive(turns: int, trig: L1Triggers | None = None) -> list[int]:
    """Feed turns, succeed every run at once; return the turn numbers at which L1 ran."""
    trig = trig or L1Triggers()
    state, runs = TriggerState(), []
    for n in range(1, turns + 1):
        state, d = trig.on_turn(state, T0 + timedelta(seconds=n))
        if d.run:
            runs.append(n)
            state, again = trig.on_success(state, T0)
            assert not again.run
    return runs


def test_warm_up_1_2_4_then_every_5() -> None:
    assert drive(22) == [1, 3, 7, 12, 17, 22]


def test_warm_up_off_runs_every_n() -> None:
    assert drive(10, L1Triggers(TriggerConfig(warmup=False))) == [5, 10]


def test_idle_timeout_runs_pending_turns() -> None:
    trig = L1Triggers()
    state, _ = trig.on_turn(TriggerState(), T0)
    state, _ = trig.on_success(state.model_copy(update={"running": True, "inflight": 1}), T0)
    state, d = trig.on_turn(state, T0 + timedelta(seconds=1))  # 1 pending < threshold 2
    assert not d.run and d.wake_at == T0 + timedelta(seconds=601)
    state, d = trig.on_tick(state, T0 + timedelta(seconds=300))
    assert not d.run
    state, d = trig.on_tick(state, T0 + timedelta(seconds=601))
    assert d.run and d.reason == "idle" and state.running


def test_session_end_runs_whatever_is_pending_and_nothing_when_empty() -> None:
    trig = L1Triggers(TriggerConfig(warmup=False))
    state, d = trig.on_session_end(TriggerState(), T0)
    assert not d.run
    state, _ = trig.on_turn(state, T0)
    state, d = trig.on_session_end(state, T0)
    assert d.run and d.reason == "session_end"


def test_turns_during_a_run_cause_a_catch_up() -> None:
    trig = L1Triggers(TriggerConfig(warmup=False, every_n=2))
    state = TriggerState()
    for _ in range(2):
        state, d = trig.on_turn(state, T0)
    assert d.run
    for _ in range(2):
        state, d = trig.on_turn(state, T0)
        assert not d.run  # never double-queued
    state, d = trig.on_success(state, T0)
    assert d.run and d.reason == "catch_up" and state.inflight == 2


def test_failure_backs_off_then_dead_letters_with_reason_and_keeps_turns_pending() -> None:
    retry = RetryPolicy(attempts=3, base_delay=10, max_delay=600)
    trig = L1Triggers(TriggerConfig(warmup=False, every_n=1, retry=retry))
    state, d = trig.on_turn(TriggerState(), T0)
    assert d.run
    state, d = trig.on_failure(state, T0, "model down")
    assert not d.run and d.wake_at == T0 + timedelta(seconds=10)
    state, d = trig.on_tick(state, T0 + timedelta(seconds=5))
    assert not d.run
    state, d = trig.on_tick(state, T0 + timedelta(seconds=10))
    assert d.run and d.reason == "retry"
    state, d = trig.on_failure(state, T0 + timedelta(seconds=10), "model down")
    assert d.wake_at == T0 + timedelta(seconds=30)
    state, d = trig.on_tick(state, T0 + timedelta(seconds=30))
    state, d = trig.on_failure(state, T0 + timedelta(seconds=30), "model down")
    assert d.dead_letter == "model down" and state.dead_lettered == 1 and state.pending == 1
    state, d = trig.on_tick(state, T0 + timedelta(hours=2))
    assert not d.run  # parked until the next turn
    state, d = trig.on_turn(state, T0 + timedelta(hours=3))
    assert d.run and d.reason == "threshold"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["turn", "tick", "end", "ok", "fail"]), max_size=60))
def test_invariants_hold_under_any_event_order(events: list[str]) -> None:
    trig, state, now = L1Triggers(), TriggerState(), T0
    for ev in events:
        now += timedelta(seconds=120)
        if ev == "turn":
            state, d = trig.on_turn(state, now)
        elif ev == "tick":
            state, d = trig.on_tick(state, now)
        elif ev == "end":
            state, d = trig.on_session_end(state, now)
        elif state.running:
            state, d = trig.on_success(state, now) if ev == "ok" else trig.on_failure(state, now, "x")
        else:
            continue
        assert 0 <= state.inflight <= state.pending
        assert not (d.run and not state.running)
        assert state.pending >= 0


def _one_turn_before(trig: L1Triggers, state: TriggerState, now: datetime) -> tuple[TriggerState, Decision]:
    """``on_turn`` as it was written before ``on_turns`` (one state copy per turn): the reference."""
    state = state.model_copy(update={"pending": state.pending + 1, "last_turn_at": now})
    if state.running:
        return state, Decision()
    if state.retry_at is None and state.pending >= trig.threshold(state):
        return state.model_copy(update={"running": True, "inflight": state.pending, "rerun": False}), Decision(
            run=True, reason="threshold"
        )
    return trig._wait(state)


@settings(max_examples=300, deadline=None)
@given(
    st.builds(
        TriggerState,
        pending=st.integers(0, 12),
        inflight=st.integers(0, 12),
        running=st.booleans(),
        rerun=st.booleans(),
        warmup_threshold=st.integers(0, 8),
        last_turn_at=st.sampled_from([None, T0]),
        retry_at=st.sampled_from([None, T0 + timedelta(seconds=30)]),
    ),
    st.integers(1, 12),
    st.booleans(),
)
def test_n_turns_at_once_are_n_single_turns(state: TriggerState, n: int, warmup: bool) -> None:
    """What the scheduler did per user and batch: fold the turns one by one, keeping the decision that started
    a run (else the last one)."""
    trig, now = L1Triggers(TriggerConfig(warmup=warmup)), T0 + timedelta(seconds=60)
    folded, decision = state, Decision()
    for _ in range(n):
        folded, step = _one_turn_before(trig, folded, now)
        decision = step if step.run or not decision.run else decision
    assert trig.on_turns(state, now, n) == (folded, decision)
