"""``mnemoflow export`` / ``import`` / ``reindex`` on a data directory written by the L1 pipeline."""

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mnemoflow.cli import app
from mnemoflow.config import Settings
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.events import TurnEvent
from mnemoflow.index.factory import index_path, open_store
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock

T0 = datetime(2026, 2, 3, 10, 0, tzinfo=UTC)
EMB = HashingEmbedder(384)
SAID = [
    "I grow tomatoes on my balcony in Porto",
    "Remind me to call my sister Ines on Sundays",
    "I am learning the cello",
    "Always keep answers short",
]
QUERIES = ["tomatoes", "sister", "cello", "answers", "balcony Porto"]


def top(settings: Settings, tenant: str, user: str) -> dict[str, list[str]]:
    store = open_store(settings, dim=EMB.dim, embedding_model=EMB.model_id)
    try:
        return {q: [h.id for h in store.search(tenant, user, q, EMB.embed_query([q])[0], 10)] for q in QUERIES}
    finally:
        store.close()


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("MNEMOFLOW_EMBEDDER", "hashing")
    settings = Settings(data_dir=tmp_path / "a", embedder="hashing")
    files = LocalFileStore(settings.data_dir)
    L0Writer(files).write(
        [
            TurnEvent(tenant="default", message_id=f"m{i}", user="rui", session="s", role="user", content=t, ts=T0)
            for i, t in enumerate(SAID)
        ]
    )
    store = open_store(settings, dim=EMB.dim, embedding_model=EMB.model_id)
    asyncio.run(
        L1Pipeline(
            files=files,
            store=store,
            embedder=EMB,
            extractor=HeuristicExtractor(),
            judge=HeuristicJudge(),
            clock=ManualClock(T0),
        ).run("default", "rui")
    )
    store.close()
    return settings


def test_reindex_rebuilds_a_deleted_index_with_the_same_recall(data: Settings) -> None:
    before = top(data, "default", "rui")
    assert all(before.values())
    for p in Path(index_path(data)).parent.iterdir():
        p.unlink()
    result = CliRunner().invoke(app, ["reindex", "--data-dir", str(data.data_dir)])
    assert result.exit_code == 0 and "of 1 users" in result.output, result.output
    assert top(data, "default", "rui") == before


def test_export_then_import_elsewhere_under_another_id(data: Settings, tmp_path: Path) -> None:
    bundle = tmp_path / "rui.tar"
    out = CliRunner().invoke(app, ["export", "rui", "-o", str(bundle), "--data-dir", str(data.data_dir)])
    assert out.exit_code == 0, out.output
    other = Settings(data_dir=tmp_path / "b", embedder="hashing")
    result = CliRunner().invoke(
        app, ["import", str(bundle), "--user", "rui2", "--tenant", "acme", "--data-dir", str(other.data_dir)]
    )
    assert result.exit_code == 0, result.output
    assert top(other, "acme", "rui2") == top(data, "default", "rui")
