"""Memory and offload routes with in-process fakes (the real stack runs them in tests/integration)."""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mnemoflow.config import TOPIC_JOBS, Settings
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.events import TurnEvent
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.offload.compact import Removed
from mnemoflow.offload.replies import CompactReply
from mnemoflow.offload.session_state import SessionState
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ListBus, ManualClock
from serving.api import create_api

KEY = {"Authorization": "Bearer key-acme"}
EMB = HashingEmbedder(64)
T0 = datetime(2026, 4, 2, 15, 30, tzinfo=UTC)
SAID = ["I am a chemist and I drink oat milk every morning", "Please always answer in French", "thanks!"]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[TestClient, ListBus, list[tuple]]:
    import asyncio

    files = LocalFileStore(tmp_path)
    events = [
        TurnEvent(tenant="acme", message_id=f"m{i}", user="ana", session="s", role="user", content=text, ts=T0)
        for i, text in enumerate(SAID)
    ]
    L0Writer(files).write(events)
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    pipeline = L1Pipeline(
        files=files,
        store=store,
        embedder=EMB,
        extractor=HeuristicExtractor(),
        judge=HeuristicJudge(),
        clock=ManualClock(T0),
    )
    asyncio.run(pipeline.run("acme", "ana"))
    calls: list[tuple] = []

    async def compact(tenant: str, session: str, messages: list[dict[str, Any]], window: int) -> CompactReply:
        calls.append((tenant, session, len(messages), window))
        return CompactReply(
            messages=messages,
            removed=[Removed("c0", "dropped", "refs/c0.md")],
            level="mild",
            tokens_before=90,
            tokens_after=40,
        )

    async def state(tenant: str, session: str) -> SessionState:
        return SessionState(tenant=tenant, session=session, count=2, last_seq=1)

    bus = ListBus()
    settings = Settings(data_dir=tmp_path, api_keys={"acme": "key-acme", "other": "key-other"})
    app = create_api(
        settings,
        bus,
        session_state=state,
        compact=compact,
        recaller_factory=lambda: Recaller(store=store, embedder=EMB, files=files),
    )
    return TestClient(app), bus, calls


def test_recall_returns_both_contexts_and_hits_with_provenance(setup: tuple) -> None:
    client, _, _ = setup
    out = client.post("/v1/recall", json={"user": "ana", "query": "what milk does she drink"}, headers=KEY).json()
    assert "oat milk" in out["prepend_context"] and "memory_search" in out["system_context"]
    assert out["hits"] and all(h["source_message_ids"] for h in out["hits"])
    atom = out["hits"][0]["id"]
    drilled = client.get(f"/v1/users/ana/atoms/{atom}", headers=KEY).json()
    assert {m["id"] for m in drilled["messages"]} <= {"m0", "m1", "m2"} and drilled["messages"]
    assert out["degraded"] is None and out["timed_out"] is False
    assert 'mnemoflow_recalls_total{outcome="full"} 1.0' in client.get("/metrics").text


def test_tools_and_tenant_isolation(setup: tuple) -> None:
    client, _, _ = setup
    hits = client.post("/v1/memory/search", json={"user": "ana", "query": "French"}, headers=KEY).json()
    assert any("French" in h["text"] for h in hits)
    convo = client.post("/v1/conversations/search", json={"user": "ana", "query": "oat milk"}, headers=KEY).json()
    assert convo[0]["message"]["id"] == "m0"
    other = {"Authorization": "Bearer key-other"}
    assert client.post("/v1/memory/search", json={"user": "ana", "query": "French"}, headers=other).json() == []
    assert client.get("/v1/users/ana/atoms/x", headers=KEY).status_code == 404


def test_session_end_publishes_a_job(setup: tuple) -> None:
    client, bus, _ = setup
    assert client.post("/v1/sessions/s/end", json={"user": "ana"}, headers=KEY).status_code == 202
    [(topic, [(key, value, _)])] = bus.sent
    assert (topic, key, json.loads(value)["kind"]) == (TOPIC_JOBS, "acme/ana", "session_end")


@pytest.mark.parametrize(
    ("messages", "window", "reason"),
    [
        ([{"role": "tool", "tool_call_id": "c1", "content": "x"}], 1000, "c1"),
        ([{"role": "robot", "content": "x"}], 1000, "unknown role"),
        ([{"role": "user", "content": "x" * 4000}], 10, "window"),
    ],
)
def test_malformed_compaction_is_refused_before_the_actor_is_called(
    setup: tuple, messages: list, window: int, reason: str
) -> None:
    client, _, calls = setup
    response = client.post("/v1/sessions/s/compact", json={"messages": messages, "window": window}, headers=KEY)
    assert response.status_code == 400 and reason in response.json()["detail"] and calls == []


def test_compaction_goes_to_the_session_actor(setup: tuple) -> None:
    client, _, calls = setup
    body = {"messages": [{"role": "user", "content": "hi"}], "window": 8000}
    response = client.post("/v1/sessions/s/compact", json=body, headers=KEY)
    assert response.status_code == 200 and calls == [("acme", "s", 1, 8000)]
    assert response.json() == {
        "messages": body["messages"],
        "level": "mild",
        "tokens_before": 90,
        "tokens_after": 40,
        "canvas": None,
        "removed": [{"tool_call_id": "c0", "how": "dropped", "ref": "refs/c0.md", "node_id": None}],
        "shard_ms": 0.0,  # a fake shard, which does not time itself
    }
    assert client.get("/v1/sessions/s/nodes/N1", headers=KEY).status_code == 404
    assert client.get("/v1/sessions/s/canvases", headers=KEY).json() == []


def test_session_state_and_compaction_replies_are_typed_in_the_openapi_docs(setup: tuple) -> None:
    client, _, _ = setup
    state = client.get("/v1/sessions/s/state", headers=KEY).json()
    assert (state["tenant"], state["session"], state["count"], state["last_seq"]) == ("acme", "s", 2, 1)
    paths = client.get("/openapi.json").json()["paths"]

    def schema(path: str, method: str) -> str:
        return paths[path][method]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]

    assert schema("/v1/sessions/{session}/compact", "post").endswith("/CompactReply")
    assert schema("/v1/sessions/{session}/state", "get").endswith("/SessionState")
