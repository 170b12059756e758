from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemoflow.events import TurnEvent
from mnemoflow.memory.l0 import L0Message, L0Writer, l0_line, read_l0
from mnemoflow.storage import Layout, LocalFileStore

T0 = datetime(2026, 3, 1, 23, 59, 58, tzinfo=UTC)


def turn(i: int, user: str = "u1", ts: datetime = T0) -> TurnEvent:
    return TurnEvent(tenant="t", message_id=f"m{i}", user=user, session="s", role="user", content=f"msg {i}", ts=ts)


def test_writes_in_order_into_the_day_of_each_message(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    events = [turn(0), turn(1, ts=T0 + timedelta(seconds=5)), turn(2, user="u2")]
    assert L0Writer(files).write(events) == (3, 0)
    assert [m.id for m in read_l0(files, "t", "u1")] == ["m0", "m1"]
    assert [m.id for m in read_l0(files, "t", "u1", day=date(2026, 3, 2))] == ["m1"]
    assert files.exists(Layout.conversation_day("t", "u2", T0.date()))


def test_replay_writes_nothing_twice_even_with_a_fresh_writer(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    events = [turn(i) for i in range(10)]
    L0Writer(files).write(events[:6])
    assert L0Writer(files).write(events) == (4, 6)  # a new process knows nothing but the files
    assert [m.id for m in read_l0(files, "t", "u1")] == [f"m{i}" for i in range(10)]


def test_duplicates_inside_one_batch_are_written_once(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    assert L0Writer(files).write([turn(1), turn(1), turn(2)]) == (2, 1)


def test_a_torn_line_from_a_crash_is_repaired_before_appending(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    L0Writer(files).write([turn(0)])
    path = tmp_path / Layout.conversation_day("t", "u1", T0.date())
    with path.open("ab") as fh:
        fh.write(b'{"id":"m1","sess')
    L0Writer(files).write([turn(1)])
    assert [m.id for m in read_l0(files, "t", "u1")] == ["m0", "m1"]


def test_a_failed_append_forgets_the_ids_it_had_not_written(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    writer = L0Writer(files)
    calls = {"n": 0}
    real = files.append_lines

    def flaky(path: str, lines: list[str]) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        real(path, lines)

    files.append_lines = flaky  # type: ignore[method-assign]
    events = [turn(0, user="a"), turn(1, user="b"), turn(2, user="c")]
    try:
        writer.write(events)
    except OSError:
        pass
    files.append_lines = real  # type: ignore[method-assign]
    writer.write(events)  # the retry
    for user, mid in (("a", "m0"), ("b", "m1"), ("c", "m2")):
        assert [m.id for m in read_l0(files, "t", user)] == [mid]


def test_a_failed_read_of_a_later_day_forgets_the_ids_of_the_earlier_ones(tmp_path: Path) -> None:
    """The ids of the first user's file were cached before the second user's file failed to load: a retry must
    still write the first user's event (helper found: it was skipped as already applied, and lost)."""
    files = LocalFileStore(tmp_path)
    writer = L0Writer(files)
    writer.write([turn(0, user="a")])  # a's ids are cached now
    real = files.read_lines

    def failing(path: str):  # type: ignore[no-untyped-def]
        if "/b/" in path:
            raise OSError("read error")
        return real(path)

    files.read_lines = failing  # type: ignore[method-assign]
    files.append_lines(Layout.conversation_day("t", "b", T0.date()), [l0_line(turn(9, user="b"))])
    try:
        writer.write([turn(1, user="a"), turn(2, user="b")])
    except OSError:
        pass
    files.read_lines = real  # type: ignore[method-assign]
    assert writer.write([turn(1, user="a"), turn(2, user="b")]) == (2, 0)
    assert [m.id for m in read_l0(files, "t", "a")] == ["m0", "m1"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=60), st.integers(1, 3))
def test_any_redelivery_pattern_yields_each_id_once_in_first_seen_order(ids: list[int], cache: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        files = LocalFileStore(tmp)
        writer = L0Writer(files, cache_files=cache)
        for start in range(0, len(ids), 7):  # batches, as the stream delivers them
            writer.write([turn(i) for i in ids[start : start + 7]])
        expected = list(dict.fromkeys(f"m{i}" for i in ids))
        assert [m.id for m in read_l0(files, "t", "u1", limit=10_000)] == expected


_ids = st.none() | st.sampled_from(["coder", "support.eu", "a:b@c"])


@given(
    st.text(max_size=40),
    st.sampled_from(["user", "assistant"]),
    st.none() | st.text(min_size=1, max_size=20),
    st.datetimes(timezones=st.timezones()),
    _ids,
    _ids,
    st.none() | st.sampled_from(["shared", "team", "agent"]),
)
@settings(max_examples=200)
def test_the_writers_line_is_the_models_json_byte_for_byte(
    content: str,
    role: str,
    name: str | None,
    ts: datetime,
    agent: str | None,
    team: str | None,
    visibility: str | None,
) -> None:
    if (visibility == "agent" and agent is None) or (visibility == "team" and team is None):
        visibility = None  # refused at the API (tests/unit/test_ids_and_events.py)
    who = {"agent": agent, "team": team, "visibility": visibility}
    event = TurnEvent(
        tenant="t", message_id="m1", user="u", session="s", role=role, content=content, ts=ts, name=name, **who
    )
    line = l0_line(event)
    message = L0Message(id="m1", session="s", role=role, content=content, ts=event.ts, name=name, **who)
    assert line == message.model_dump_json(exclude_none=True)
    assert L0Message.model_validate_json(line) == message


def test_a_turn_without_an_agent_writes_the_line_it_always_did() -> None:
    """The exact bytes of a line from before scopes: clients that name no agent change nothing on disk."""
    assert l0_line(turn(1)) == '{"id":"m1","session":"s","role":"user","content":"msg 1","ts":"2026-03-01T23:59:58Z"}'


def test_a_message_belongs_to_what_it_asked_for_else_to_its_agent_else_its_team_else_everyone() -> None:
    def scope(**who: str) -> str:
        return L0Message(id="m", session="s", role="user", content="x", ts=T0, **who).scope

    assert scope() == "shared"  # the default agent, and every line written before scopes
    assert scope(team="eng") == "team:eng"
    assert scope(agent="coder", team="eng") == "agent:coder"
    assert scope(agent="coder", team="eng", visibility="team") == "team:eng"
    assert scope(agent="coder", visibility="shared") == "shared"
