"""The retention sweep on real files: what expires per tenant, what stays, and the counts /metrics shows."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from mnemoflow.config import Retention, Settings
from mnemoflow.events import ToolResultEvent, TurnEvent
from mnemoflow.handlers import HandlerContext, WriterThread
from mnemoflow.handlers.retention import RetentionSweeper
from mnemoflow.memory.l0 import L0Writer, read_l0
from mnemoflow.offload.entries import OffloadWriter, read_entries, read_ref
from mnemoflow.retry import RetryPolicy
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ListBus, ManualClock
from serving.api import create_api

NOW = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


def seed(files: LocalFileStore, tenant: str) -> None:
    L0Writer(files).write(
        [
            TurnEvent(
                tenant=tenant,
                message_id=f"m{d}",
                user="u",
                session="s",
                role="user",
                content=f"day {d}",
                ts=NOW - timedelta(days=d),
            )
            for d in (1, 5, 40)
        ]
    )
    OffloadWriter(files).write(
        [
            ToolResultEvent(
                tenant=tenant,
                tool_call_id=f"c{d}",
                session="s",
                tool_name="bash",
                arguments="",
                content=f"output {d}",
                ts=NOW - timedelta(days=d),
            )
            for d in (40, 20, 5, 1)
        ]
    )


def test_each_tenant_keeps_what_its_policy_allows(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    seed(files, "acme")
    seed(files, "keep")
    policies = {"acme": Retention(l0_days=30, offload_days=30, refs_days=10)}
    sweeper = RetentionSweeper(HandlerContext(ManualClock(NOW), RetryPolicy(), WriterThread()), files, policies)
    done = asyncio.run(sweeper.run())
    assert done["acme"].model_dump() == {"l0_days": 1, "offload_entries": 1, "refs": 2}
    assert [m.content for m in read_l0(files, "acme", "u")] == ["day 5", "day 1"]
    assert [e.tool_call_id for e in read_entries(files, "acme", "s")] == ["c20", "c5", "c1"]
    assert [read_ref(files, "acme", "s", c) is not None for c in ("c40", "c20", "c5", "c1")] == [
        False,
        False,
        True,
        True,
    ]
    assert len(read_l0(files, "keep", "u")) == 3 and len(read_entries(files, "keep", "s")) == 4  # not listed: kept
    assert asyncio.run(sweeper.run())["acme"].model_dump() == {"l0_days": 0, "offload_entries": 0, "refs": 0}
    # The newest entry always stays, so the next result continues the sequence.
    asyncio.run(
        RetentionSweeper(
            HandlerContext(ManualClock(NOW + timedelta(days=400)), RetryPolicy(), WriterThread()), files, policies
        ).run()
    )
    assert [e.seq for e in read_entries(files, "acme", "s")] == [3]

    api = TestClient(create_api(Settings(data_dir=tmp_path, api_keys={"acme": "k"}), ListBus()))
    text = api.get("/metrics").text
    assert 'mnemoflow_expired{kind="refs",tenant="acme"} 4.0' in text
    assert 'mnemoflow_expired{kind="l0_days",tenant="acme"} 3.0' in text
    assert 'mnemoflow_erased{kind="users",tenant="acme"} 0.0' in text
