"""The HTTP contract with the bus faked (the real stack runs the same cases in tests/integration)."""

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mnemoflow.config import TOPIC_TOOL_RESULTS, TOPIC_TURNS, Settings
from mnemoflow.errors import Conflict, InvalidInput, NotFound, StorageError
from mnemoflow.sharding import shard_for
from mnemoflow.testing import ListBus
from serving.api import create_api

KEY = {"Authorization": "Bearer key-acme"}


@pytest.fixture
def bus() -> ListBus:
    return ListBus()


@pytest.fixture
def client(tmp_path: Path, bus: ListBus) -> TestClient:
    settings = Settings(data_dir=tmp_path, api_keys={"acme": "key-acme", "other": "key-other"}, session_shards=4)
    return TestClient(create_api(settings, bus))


def turn(**over: object) -> dict:
    return {"message_id": "m1", "user": "u1", "session": "s1", "role": "user", "content": "hi", **over}


def test_turns_are_published_keyed_by_tenant_and_user(client: TestClient, bus: ListBus) -> None:
    response = client.post("/v1/turns", json={"turns": [turn(), turn(message_id="m2", user="u2")]}, headers=KEY)
    assert response.status_code == 202 and response.json() == {"accepted": 2}
    topic, records = bus.sent[0]
    assert topic == TOPIC_TURNS and [r[0] for r in records] == ["acme/u1", "acme/u2"]


def test_tool_results_go_to_the_partition_of_their_shard(client: TestClient, bus: ListBus) -> None:
    body = {"results": [{"tool_call_id": "c1", "session": "s9", "tool_name": "bash", "content": "out"}]}
    assert client.post("/v1/tool-results", json=body, headers=KEY).status_code == 202
    topic, [(key, _, partition)] = bus.sent[0]
    assert (topic, key, partition) == (TOPIC_TOOL_RESULTS, "acme/s9", shard_for("acme/s9", 4))


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"turns": [turn(role="robot")]}, 422, "role"),
        ({"turns": [turn(content=7)]}, 422, "content"),
        ({"turns": [{"message_id": "m"}]}, 422, "user"),
        ({"turns": [turn(user="../etc")]}, 422, "invalid id"),
        ({"turns": [turn(session="a/b")]}, 422, "invalid id"),
        ({"turns": []}, 422, "turns"),
    ],
)
def test_bad_input_gets_a_4xx_with_a_reason_and_publishes_nothing(
    client: TestClient, bus: ListBus, body: dict, status: int, reason: str
) -> None:
    response = client.post("/v1/turns", json=body, headers=KEY)
    assert response.status_code == status and reason in response.text
    assert "Traceback" not in response.text and bus.sent == []


def test_oversized_bodies_are_refused(client: TestClient, bus: ListBus) -> None:
    big = {"turns": [turn(content="x" * 200_000, message_id=f"m{i}") for i in range(6)]}
    response = client.post("/v1/turns", json=big, headers=KEY)
    assert response.status_code == 413 and "over" in response.json()["detail"] and bus.sent == []


def test_oversized_chunked_bodies_are_refused(client: TestClient, bus: ListBus) -> None:
    def chunks():  # no Content-Length: the limit is enforced while reading
        for _ in range(40):
            yield b"x" * 65536

    response = client.post("/v1/turns", content=chunks(), headers=KEY)
    assert response.status_code == 413 and bus.sent == []


def test_missing_or_wrong_key_is_401(client: TestClient) -> None:
    assert client.post("/v1/turns", json={"turns": [turn()]}).status_code == 401
    assert client.get("/v1/users/u1/conversations", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_path_ids_are_checked(client: TestClient) -> None:
    response = client.get("/v1/users/a..b/conversations", headers=KEY)
    assert response.status_code == 422 and "invalid id" in response.text


def test_a_key_sees_only_its_tenant(tmp_path: Path, client: TestClient) -> None:
    from datetime import UTC, datetime

    from mnemoflow.events import TurnEvent
    from mnemoflow.memory.l0 import L0Writer
    from mnemoflow.storage import LocalFileStore

    event = TurnEvent(
        tenant="acme", message_id="m1", user="u1", session="s", role="user", content="secret", ts=datetime.now(UTC)
    )
    L0Writer(LocalFileStore(tmp_path)).write([event])
    assert [m["content"] for m in client.get("/v1/users/u1/conversations", headers=KEY).json()] == ["secret"]
    other = client.get("/v1/users/u1/conversations", headers={"Authorization": "Bearer key-other"})
    assert other.status_code == 200 and other.json() == []


def test_health_metrics_and_openapi(client: TestClient) -> None:
    client.post("/v1/turns", json={"turns": [turn()]}, headers=KEY)
    assert client.get("/health").json() == {"status": "ok", "checks": []}  # no checks injected here
    metrics = client.get("/metrics").text
    assert 'mnemoflow_events_submitted_total{kind="turn"} 1.0' in metrics
    assert 'mnemoflow_api_requests_total{route="/v1/turns",status="202"} 1.0' in metrics
    assert "/v1/turns" in client.get("/openapi.json").json()["paths"]


def test_state_without_session_actors_is_503(client: TestClient) -> None:
    assert client.get("/v1/sessions/s1/state", headers=KEY).status_code == 503


@pytest.mark.parametrize(
    ("error", "status"),
    [(NotFound("no such thing"), 404), (Conflict("taken"), 409), (InvalidInput("bad"), 400), (StorageError("io"), 500)],
)
def test_a_core_error_reaching_the_app_gets_its_status_and_reason(
    tmp_path: Path, bus: ListBus, error: Exception, status: int
) -> None:
    class Failing:
        def memory_search(self, *args: object) -> None:
            raise error

    settings = Settings(data_dir=tmp_path, api_keys={"acme": "key-acme"})
    client = TestClient(create_api(settings, bus, recaller_factory=lambda: Failing()), raise_server_exceptions=False)
    response = client.post("/v1/memory/search", json={"user": "u1", "query": "tea"}, headers=KEY)
    assert response.status_code == status and response.json() == {"detail": str(error)}
