from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mnemoflow.cli import app
from mnemoflow.config import Settings
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.index.factory import open_store
from mnemoflow.ports.vectors import AtomRow, EmbeddingModelMismatch

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_reembed_moves_the_index_to_the_configured_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(data_dir=tmp_path, embedder="hashing")
    old = open_store(settings, dim=384, embedding_model="old-model")
    unit = [1.0] + [0.0] * 383
    rows = [
        AtomRow(
            id=f"a{i}",
            tenant="t",
            user="u",
            type="persona",
            priority=50,
            text=text,
            vector=unit,
            created=T0,
            updated=T0,
        )
        for i, text in enumerate(["likes tea", "lives in Lyon"])
    ]
    old.upsert(rows)
    old.close()
    embedder = HashingEmbedder(dim=384)
    stale = open_store(settings, dim=384, embedding_model=embedder.model_id)
    with pytest.raises(EmbeddingModelMismatch):  # vectors of two models are never compared
        stale.search("t", "u", "tea", embedder.embed(["tea"])[0], 1)
    stale.close()

    monkeypatch.setenv("MNEMOFLOW_EMBEDDER", "hashing")
    result = CliRunner().invoke(app, ["reembed", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0 and "re-embedded 2 atoms" in result.output, result.output

    store = open_store(settings, dim=384, embedding_model=embedder.model_id)
    [hit] = store.search("t", "u", "tea", embedder.embed(["likes tea"])[0], 1)
    assert hit.id == "a0" and hit.row.vector == pytest.approx(embedder.embed(["likes tea"])[0], abs=1e-6)
