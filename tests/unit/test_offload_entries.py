import asyncio
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from actors.shard import SessionShard
from mnemoflow.events import ToolResultEvent
from mnemoflow.offload.annotations import Annotation, annotated_entries, annotations_path
from mnemoflow.offload.entries import OffloadWriter, read_entries, read_ref
from mnemoflow.offload.replies import CompactReply
from mnemoflow.offload.session_state import SequenceGap, SessionState, advance, load_state
from mnemoflow.storage import LocalFileStore

TS = datetime(2026, 3, 1, tzinfo=UTC)
run = asyncio.run


def result(i: int, session: str = "s", content: str | None = None) -> ToolResultEvent:
    return ToolResultEvent(
        tenant="t",
        tool_call_id=f"call_{i}",
        session=session,
        tool_name="bash",
        arguments='{"cmd": "ls"}',
        content=content if content is not None else f"output {i}\n",
        ts=TS,
    )


def test_refs_are_byte_exact_and_entries_point_at_them(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    raw = "line1\r\n\ttabs  \u00e9\u4e2d\U0001f600\n" * 100
    OffloadWriter(files).write([result(0, content=raw), result(1, content="")])
    entries = read_entries(files, "t", "s")
    assert [(e.seq, e.tool_call_id, e.ref) for e in entries] == [
        (0, "call_0", "refs/call_0.md"),
        (1, "call_1", "refs/call_1.md"),
    ]
    assert read_ref(files, "t", "s", "call_0") == raw.encode()
    assert read_ref(files, "t", "s", "call_1") == b""
    assert entries[0].result_bytes == len(raw.encode()) and entries[0].result_tokens > 0


def test_redelivery_after_restart_keeps_one_entry_per_call_and_dense_seq(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    OffloadWriter(files).write([result(i) for i in range(3)])
    appended = OffloadWriter(files).write([result(i) for i in range(5)])
    assert [e.tool_call_id for e in appended[0].new_entries] == ["call_3", "call_4"]
    assert appended[0].last_seq == 4
    assert [e.seq for e in read_entries(files, "t", "s")] == [0, 1, 2, 3, 4]


def test_advance_ignores_old_entries_and_refuses_gaps(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    OffloadWriter(files).write([result(i) for i in range(4)])
    entries = read_entries(files, "t", "s")
    state = advance(SessionState(tenant="t", session="s"), entries[:2])
    assert (state.count, state.last_seq) == (2, 1)
    assert advance(state, entries[:2]) is state
    with pytest.raises(SequenceGap):
        advance(state, entries[3:])
    assert advance(state, entries).count == 4


def test_shard_fills_gaps_from_the_log_and_reloads_after_restart(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    writer = OffloadWriter(files)
    shard = SessionShard(0, str(tmp_path), idle_seconds=60, max_sessions=10)
    first = writer.write([result(0)])[0]
    assert run(shard.sync([("t", "s", [first.new_entries[0].model_dump_json()], 0)])) == 1
    later = writer.write([result(i) for i in range(1, 6)])[0]
    # The shard hears only about the last entry (earlier notifications were lost): it reads the rest.
    assert run(shard.sync([("t", "s", [later.new_entries[-1].model_dump_json()], 5)])) == 1
    state = run(shard.get_state("t", "s"))
    assert state.count == 6 and state.last_entry is not None and state.last_entry.tool_call_id == "call_5"
    assert run(shard.sync([("t", "s", [later.new_entries[-1].model_dump_json()], 5)])) == 0  # redelivery
    restarted = SessionShard(0, str(tmp_path), idle_seconds=60, max_sessions=10)
    assert run(restarted.get_state("t", "s")).last_seq == 5
    assert load_state(files, "t", "s").count == 6  # persisted, not only in memory


def test_shard_memory_is_bounded(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    shard = SessionShard(0, str(tmp_path), idle_seconds=60, max_sessions=3)
    for k in range(10):
        appended = OffloadWriter(files).write([result(0, session=f"s{k}")])
        run(shard.sync([("t", f"s{k}", [e.model_dump_json() for e in appended[0].new_entries], 0)]))
    assert shard.stats()["sessions_in_memory"] == 3
    assert run(shard.get_state("t", "s0")).count == 1  # evicted, reloaded from its files


def _summaries_per_call(files: LocalFileStore) -> Counter[str]:
    lines = files.read_lines(annotations_path("t", "s"))
    return Counter(note.tool_call_id for line in lines if (note := Annotation.model_validate_json(line)).summary)


def test_the_shard_summarises_entries_as_they_arrive_and_a_turn_does_not_again(tmp_path: Path) -> None:
    """New entries are summarised in the background after the notice (those a gap hid too), without the notice
    waiting for it; a compaction that takes the session first summarises them itself; no entry is summarised
    twice."""
    files = LocalFileStore(tmp_path)
    writer = OffloadWriter(files)
    shard = SessionShard(0, str(tmp_path), idle_seconds=60, max_sessions=10)
    calls = [{"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}} for i in range(6)]
    messages = [
        {"role": "user", "content": "free some disk space"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"call_{i}", "content": f"output {i}\n"} for i in range(6)),
    ]

    async def summarised(want: int) -> Counter[str]:
        for _ in range(200):
            if len(done := _summaries_per_call(files)) >= want:
                return done
            await asyncio.sleep(0.01)
        return _summaries_per_call(files)

    async def scenario() -> None:
        first = writer.write([result(0, content="ERROR: disk full\n"), result(1)])[0]
        await shard.sync([("t", "s", [e.model_dump_json() for e in first.new_entries], 1)])
        assert _summaries_per_call(files) == Counter()  # the notice did not wait for the summaries
        assert await summarised(2) == Counter({"call_0": 1, "call_1": 1})
        hidden = writer.write([result(i) for i in range(2, 4)])[0]  # the shard hears only of call_3
        await shard.sync([("t", "s", [hidden.new_entries[-1].model_dump_json()], 3)])
        assert await summarised(4) == Counter({f"call_{i}": 1 for i in range(4)})
        later = writer.write([result(i) for i in range(4, 6)])[0]
        await shard.sync([("t", "s", [e.model_dump_json() for e in later.new_entries], 5)])
        reply = await shard.compact("t", "s", messages, 100_000)  # before the background task has run
        assert isinstance(reply, CompactReply)
        assert _summaries_per_call(files) == Counter({f"call_{i}": 1 for i in range(6)})
        await asyncio.sleep(0.1)  # the background task finds nothing left
        assert _summaries_per_call(files) == Counter({f"call_{i}": 1 for i in range(6)})

    run(scenario())
    assert "disk full" in (annotated_entries(files, "t", "s")[0].summary or "")
