"""The session shard distils the tasks before a new long task in the background, not the one going on."""

import asyncio
import time
from pathlib import Path

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from actors.shard import SessionShard
from mnemoflow.events import ToolResultEvent
from mnemoflow.offload.entries import OffloadWriter
from mnemoflow.offload.replies import CompactReply
from mnemoflow.skills.store import SkillStore
from mnemoflow.storage import LocalFileStore
from mnemoflow.tracing import Tracing
from tests.skill_tasks import EN, NOW, trajectory

NEXT = (
    "Add support for ISO week dates (2026-W05-3) to dateparse.parse_week, with tests, and document the "
    "new format in the README's table of supported inputs."
)


def test_a_new_long_task_sends_the_finished_one_to_the_skill_pass(tmp_path: Path) -> None:
    shard = SessionShard(0, str(tmp_path), 60.0, 10)
    spans = InMemorySpanExporter()
    shard._tracing = Tracing.to(spans, "shard", batch=False)
    first = trajectory(EN)
    files = LocalFileStore(tmp_path)

    calls = {c["id"]: c["function"] for m in first for c in m.get("tool_calls") or ()}

    async def run() -> list[str]:
        for i, message in enumerate(first):
            if message["role"] == "tool":  # what the stream worker writes as each result arrives
                call = calls[message["tool_call_id"]]
                event = ToolResultEvent(
                    tenant="t",
                    session="s",
                    tool_call_id=message["tool_call_id"],
                    tool_name=call["name"],
                    arguments=call["arguments"],
                    content=message["content"],
                    ts=NOW,
                )
                OffloadWriter(files).write([event])
            elif message["role"] == "assistant" and i > 1:
                assert isinstance(await shard.compact("t", "s", first[:i], 50_000), CompactReply)
        assert SkillStore(files, "t").names() == []  # one task, still going on: nothing distilled
        reply = await shard.compact("t", "s", [*first, {"role": "user", "content": NEXT}], 50_000)
        assert isinstance(reply, CompactReply)
        deadline = time.monotonic() + 10
        while not spans.get_finished_spans() and time.monotonic() < deadline:  # the pass's span ends after it
            await asyncio.sleep(0.02)
        return SkillStore(files, "t").names()

    (name,) = asyncio.run(run())
    skill = SkillStore(files, "t").get(name)
    assert skill.sources == ("s#001",) and skill.area == "dateparse"
    (span,) = [s for s in spans.get_finished_spans() if s.name == "mnemoflow.shard.skill_pass"]
    assert dict(span.attributes or {}) == {
        "mnemoflow.shard": 0,
        "mnemoflow.skills.engine": "heuristic",
        "mnemoflow.skills.store": 1,
    }
