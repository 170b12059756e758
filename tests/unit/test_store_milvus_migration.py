"""A Milvus collection of the layout before scopes opens with every atom shared (Milvus Lite; marked integration)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from mnemoflow.index import _milvus_schema as schema  # noqa: E402
from mnemoflow.index.milvus import MilvusVectorStore  # noqa: E402

pytestmark = pytest.mark.integration
NOW_US = int(datetime(2026, 1, 2, tzinfo=UTC).timestamp() * 1_000_000)


def _old_collection(client, name: str) -> None:  # type: ignore[no-untyped-def]
    """``create_atoms`` as it was before scopes: the same fields but ``scope``."""
    pymilvus = schema.vendor()
    DataType = pymilvus.DataType
    s = client.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("pk", DataType.VARCHAR, max_length=64, is_primary=True)
    for field in ("atom_id", "tenant", "user"):
        s.add_field(field, DataType.VARCHAR, max_length=512)
    s.add_field("type", DataType.VARCHAR, max_length=16)
    s.add_field("priority", DataType.INT64)
    s.add_field("text", DataType.VARCHAR, max_length=65535)
    s.add_field("context", DataType.VARCHAR, max_length=65535)
    s.add_field(
        "terms", DataType.VARCHAR, max_length=65535, enable_analyzer=True, analyzer_params=schema.TERMS_ANALYZER
    )
    s.add_field("created_us", DataType.INT64)
    s.add_field("updated_us", DataType.INT64)
    s.add_field("sources", DataType.VARCHAR, max_length=65535)
    s.add_field("dense", DataType.FLOAT_VECTOR, dim=4)
    s.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    s.add_function(
        pymilvus.Function(
            name="text_bm25",
            function_type=pymilvus.FunctionType.BM25,
            input_field_names=["terms"],
            output_field_names=["sparse"],
        )
    )
    ip = client.prepare_index_params()
    ip.add_index("dense", index_type="FLAT", metric_type="COSINE")
    ip.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    client.create_collection(name, schema=s, index_params=ip, consistency_level="Strong")
    client.insert(
        name,
        [
            {
                "pk": schema.primary_key("t", "me", f"a{i}"),
                "atom_id": f"a{i}",
                "tenant": "t",
                "user": "me",
                "type": "persona",
                "priority": 5,
                "text": f"from parent {i}",
                "context": "",
                "terms": f"from parent {i}",
                "created_us": NOW_US,
                "updated_us": NOW_US,
                "sources": "[]",
                "dense": [0.0, 1.0, float(i), 1.0],
            }
            for i in range(3)
        ],
    )
    schema.ensure_meta(client, name, "m", 4, 30.0)


def test_a_collection_from_before_scopes_is_rebuilt_on_open_with_every_atom_shared(tmp_path: Path) -> None:
    pymilvus = schema.vendor()
    uri = str(tmp_path / "old.db")
    client = pymilvus.MilvusClient(uri=uri)
    _old_collection(client, "atoms")
    client.close()
    store = MilvusVectorStore.open(uri, dim=4, embedding_model="m", collection="atoms")
    try:
        assert [r.scope for r in store.get("t", "me", ["a0", "a1", "a2"])] == ["shared"] * 3
        query = [0.0, 1.0, 1.0, 1.0]
        assert [h.id for h in store.bm25_search("t", "me", "parent 1", 1, visible=["shared"])] == ["a1"]
        assert store.search("t", "me", "parent", query, 5, visible=["agent:coder"]) == []
        assert len(store.search("t", "me", "parent", query, 5, visible=["shared", "agent:coder"])) == 3
    finally:
        store.close()
