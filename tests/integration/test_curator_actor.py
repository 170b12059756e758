"""UserCurator on real Ray: an L1 notification and a forced run write scenes and a persona; a killed curator
restarts, finds the scheduled user in its files and continues from the persisted cursor."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mnemoflow.memory.curation import CurationState
from mnemoflow.memory.l1.models import L1Record
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.persona.generate import MAX_PERSONA_CHARS, PersonaStore
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.memory.scenes.schedule import L2Timing
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.storage import LocalFileStore

pytestmark = pytest.mark.integration

NS = "mnemoflow-test-curator"
TOPICS = ["hiking in the alps", "jazz piano chords", "rust compiler work", "italian pasta cooking"]


@pytest.fixture(scope="module")
def ray_local():  # type: ignore[no-untyped-def]
    import ray

    from mnemoflow.cli.stack import start_local_ray

    start_local_ray("mnemoflow-test")
    yield ray
    ray.shutdown()


def records(start: int, n: int) -> list[L1Record]:
    now = datetime.now(UTC)
    return [
        L1Record(
            id=f"a{i}",
            content=f"{TOPICS[i % 4]} note {i}",
            type="episodic",
            priority=50,
            source_message_ids=[f"m{i}"],
            timestamps=[now],
            created=now + timedelta(microseconds=i),
            updated=now + timedelta(microseconds=i),
        )
        for i in range(start, start + n)
    ]


def state(files: LocalFileStore) -> CurationState:
    return CurationState.model_validate_json(files.read_bytes(ScenePaths("acme", "alice").state) or b"{}")


def test_curator_actor_runs_and_survives_a_kill(ray_local, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from actors.curator import CuratorClient, build_curators, curator_name

    ray = ray_local
    files = LocalFileStore(tmp_path)
    log = RecordLog(files, "acme", "alice")
    first = records(0, 12)
    log.append(first, [], first[-1].updated)
    timing = L2Timing(delay_after_l1=timedelta(seconds=1), min_interval=timedelta(seconds=1))
    handles = build_curators(2, tmp_path, NS, tick_seconds=0.5, timing=timing)
    client = CuratorClient(2, NS)

    async def first_round() -> tuple[dict, dict]:  # type: ignore[type-arg]
        return await client.after_l1("acme", "alice"), await client.run_now("acme", "alice")

    scheduled, out = asyncio.run(first_round())
    assert scheduled["next_wakeup"] is not None
    assert out["status"] == "applied" and out["atoms"] == 12 and out["error"] is None, out
    assert 1 <= len(SceneStore(files, "acme", "alice").load()) <= 15
    assert 0 < len(PersonaStore(files, "acme", "alice").read_body()) <= MAX_PERSONA_CHARS
    assert state(files).cursor.ts == first[-1].updated

    # more atoms, an L1 notification, then the owning curator dies before its timer fires
    more = records(12, 5)
    log.append(more, [], more[-1].updated)
    index = client.index_for("acme", "alice")
    asyncio.run(client.after_l1("acme", "alice"))
    ray.kill(handles[index], no_restart=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and state(files).cursor.ts != more[-1].updated:
        time.sleep(0.5)  # no call reaches the actor: its restarted tick loop must find alice in the files
    assert state(files).cursor.ts == more[-1].updated
    assert state(files).persona.total_processed == 17
    stats = ray.get(ray.get_actor(curator_name(index), namespace=NS).stats.remote())
    assert stats["scanned_users"] >= 1 and stats["loop_running"]
    for h in handles:
        ray.kill(h, no_restart=True)
