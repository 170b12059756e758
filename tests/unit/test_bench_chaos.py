"""bench/chaos.py without a stack: how it recognises the parts, and how it counts lost, duplicated, altered and
reordered events on disk, overall and per fault window."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from bench.chaos import Injection, renamed, summarise
from bench.chaos_checks import TENANT, Acked, check_events
from bench.chaos_stack import part_of
from mnemoflow.client.calls import batches as chunks
from mnemoflow.events import ToolResultIn, TurnIn

TS = datetime(2025, 1, 1, tzinfo=UTC)


def turn(i: int, user: str = "u", session: str = "s") -> TurnIn:
    return TurnIn(message_id=f"m{i}", user=user, session=session, role="user", content=f"turn {i}", ts=TS)


def result(i: int, session: str = "t") -> ToolResultIn:
    return ToolResultIn(tool_call_id=f"c{i}", session=session, tool_name="ls", content=f"out {i}\r\n\u00e9", ts=TS)


def test_parts_are_recognised_by_their_command_lines() -> None:
    assert part_of(["/usr/bin/java", "-Xmx256m", "-cp", "x", "kafka.Kafka", "/d/server.properties"]) == "broker"
    assert part_of(["/root/.calfkit/bin/tansu-v0.6.0", "broker", "--listener-url", "tcp://x"]) == "broker"
    assert part_of(["/v/bin/python3", "-m", "streams.worker", "worker"]) == "worker"
    assert part_of(["ray::SessionShard.sync"]) == "shard"
    assert part_of(["ray::ServeReplica:extractor:extractor.handle_request"]) == "extractor"
    assert part_of(["ray::ServeReplica:mnemoflow:api"]) is None
    assert part_of(["ray::UserCurator"]) is None
    assert part_of([]) is None


def test_chunks_keep_kinds_apart_and_renamed_rounds_get_new_ids() -> None:
    items = [turn(0), turn(1), turn(2), result(0), turn(3)]
    assert [len(c) for c in chunks(items, batch=2)] == [2, 1, 1, 1]
    again = renamed(result(0), 1)
    assert (again.tool_call_id, again.session, again.content) == ("r1.c0", "r1.t", result(0).content)
    assert renamed(turn(0), 0) == turn(0)


def write_l0(data: Path, user: str, lines: list[dict]) -> None:
    path = data / TENANT / "users" / user / "conversations" / "2025-01-01.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def l0_line(t: TurnIn, content: str | None = None) -> dict:
    return {
        "id": t.message_id,
        "session": t.session,
        "role": t.role,
        "content": content or t.content,
        "ts": TS.isoformat(),
    }


def test_lost_duplicated_altered_and_reordered_events_are_counted(tmp_path: Path) -> None:
    turns = [turn(i) for i in range(5)]
    results = [result(i) for i in range(3)]
    acked = {Acked.key_of(i): Acked(i, at=float(n), order=n) for n, i in enumerate([*turns, *results])}
    # m0 once, m1 twice, m2 altered, m3 lost, m4 before m2 (out of order), x never acknowledged
    write_l0(
        tmp_path,
        "u",
        [
            l0_line(turns[0]),
            l0_line(turns[1]),
            l0_line(turns[1]),
            l0_line(turns[4]),
            l0_line(turns[2], "edited"),
            l0_line(turn(9)),
        ],
    )
    session = tmp_path / TENANT / "sessions" / "t"
    (session / "refs").mkdir(parents=True)
    entries = []
    for seq, r in enumerate(results[:2]):  # c2 lost
        entries.append({"seq": seq, "tool_call_id": r.tool_call_id})
        (session / "refs" / f"{r.tool_call_id}.md").write_bytes(r.content.encode())
    (session / "refs" / "c1.md").write_bytes(b"out 1\n")  # not byte-exact
    (session / "offload.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries) + '{"torn')

    out = check_events(tmp_path, acked)

    keys = list(acked)
    by = {k[2]: out.occurrences[k] for k in keys}
    assert by == {"m0": 1, "m1": 2, "m2": 1, "m3": 0, "m4": 1, "c0": 1, "c1": 1, "c2": 0}
    assert {k[2] for k in out.mismatched} == {"m2", "c1"}
    assert out.details["refs_not_byte_exact"] == 1
    assert out.details["torn_lines"] == 1
    assert out.details["applied_not_acked"] == 1
    assert out.details["streams_out_of_order"] == ["u/s"]

    faults = [
        Injection("worker_sigkill", at=0.5, pid=1, recovered=True, recovery_s=1.0, end=1.5),
        Injection("broker_sigkill", at=20.0, pid=2, recovered=False, end=30.0),
        Injection("shard_sigkill", at=40.0, note="no shard process found"),
    ]
    summary = summarise(acked, out, faults)
    assert (summary["events_acked"], summary["lost"], summary["duplicated"], summary["mismatched"]) == (8, 2, 1, 2)
    assert summary["faults"] == {"worker_sigkill": 1, "broker_sigkill": 1, "shard_sigkill": 0}
    worker = summary["by_fault"]["worker_sigkill"]  # acked at 0..3.5 s: m0..m3
    assert (worker["acked"], worker["lost"], worker["duplicated"], worker["recovered"]) == (4, 1, 1, 1)
    assert summary["by_fault"]["broker_sigkill"]["recovered"] == 0
    assert summary["recovery_s"] == {"p50": 1.0, "max": 1.0}
