"""Milvus Lite: the server-side ``RRFRanker(RRF_K)`` must agree with the Python RRF the other backends use."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from mnemoflow.index.milvus import MilvusVectorStore  # noqa: E402
from mnemoflow.ports.vectors import ATOM_TYPES, AtomRow  # noqa: E402

pytestmark = pytest.mark.integration
WORDS = [f"w{i}" for i in range(40)]


def test_server_rrf_matches_client_rrf(tmp_path: Path) -> None:
    rng = random.Random(3)
    now = datetime.now(UTC)
    uri = str(tmp_path / "fusion.db")
    server = MilvusVectorStore.open(uri, dim=8, embedding_model="m", collection="c", fusion="server")
    client = MilvusVectorStore.open(uri, dim=8, embedding_model="m", collection="c", fusion="client")
    server.upsert(
        [
            AtomRow(
                id=f"a{i}",
                tenant="t",
                user=f"u{i % 3}",
                type=ATOM_TYPES[i % 3],
                priority=0,
                text=" ".join(rng.choices(WORDS, k=8)),
                vector=[rng.gauss(0, 1) for _ in range(8)],
                created=now,
                updated=now,
            )
            for i in range(300)
        ]
    )
    for _ in range(20):
        user, text, vec = f"u{rng.randrange(3)}", " ".join(rng.choices(WORDS, k=3)), [rng.gauss(0, 1) for _ in range(8)]
        by_server = server.search("t", user, text, vec, 10)
        by_client = client.search("t", user, text, vec, 10)
        assert [h.score for h in by_server] == pytest.approx([h.score for h in by_client], rel=1e-5)
        assert all(h.dense_rank or h.bm25_rank for h in by_client)
        assert {h.row.user for h in by_server} == {user}
    server.close()
