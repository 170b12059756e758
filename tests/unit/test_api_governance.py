"""The governance routes over a test client, with the worker's commands handler applying what the API published.

Checks the HTTP contract of issue 10: 202 with an operation id, ``wait`` answering once applied, 404 / 422 / 409,
and tenant isolation (another tenant's key never reads or changes these atoms, whatever the path).
"""

from __future__ import annotations

import asyncio
import io
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemoflow.config import TOPIC_COMMANDS, Settings
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.events import TurnEvent
from mnemoflow.governance.applier import OperationApplier
from mnemoflow.handlers import CommandsHandler, HandlerContext, RawRecord, WriterThread
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.retry import RetryPolicy
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ListBus, ManualClock
from serving.api import create_api

ACME = {"Authorization": "Bearer key-acme"}
OTHER = {"Authorization": "Bearer key-other"}
EMB = HashingEmbedder(64)
T0 = datetime(2026, 4, 2, 15, 30, tzinfo=UTC)
SAID = ["I am a chemist and I drink oat milk every morning", "Please always answer in French"]


class Api:
    def __init__(self, root: Path) -> None:
        self.files = LocalFileStore(root)
        L0Writer(self.files).write(
            [
                TurnEvent(tenant="acme", message_id=f"m{i}", user="ana", session="s", role="user", content=t, ts=T0)
                for i, t in enumerate(SAID)
            ]
        )
        self.store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
        clock = ManualClock(T0)
        pipeline = L1Pipeline(
            files=self.files,
            store=self.store,
            embedder=EMB,
            extractor=HeuristicExtractor(),
            judge=HeuristicJudge(),
            clock=clock,
        )
        asyncio.run(pipeline.run("acme", "ana"))
        applier = OperationApplier.over(
            files=self.files, store=self.store, embedder=EMB, clock=clock, pipeline=pipeline
        )
        self.worker = CommandsHandler(
            HandlerContext(clock, RetryPolicy(attempts=1), WriterThread()), self.files, applier.apply
        )
        self.bus = ListBus()
        settings_ = Settings(data_dir=root, api_keys={"acme": "key-acme", "other": "key-other"})
        app = create_api(
            settings_, self.bus, recaller_factory=lambda: Recaller(store=self.store, embedder=EMB, files=self.files)
        )
        self.client = TestClient(app)

    def published(self) -> list[tuple[str, bytes]]:
        return [
            (key, value) for topic, records in self.bus.sent if topic == TOPIC_COMMANDS for key, value, _ in records
        ]

    def work(self) -> None:
        """The worker consumes what was published so far."""
        records = [
            RawRecord(value, key.encode(), TOPIC_COMMANDS, 0, i) for i, (key, value) in enumerate(self.published())
        ]
        self.bus.sent.clear()
        asyncio.run(self.worker.handle(records))

    def atoms(self, headers: dict[str, str] = ACME, **params: Any) -> Any:
        return self.client.get("/v1/users/ana/atoms", headers=headers, params=params)


@pytest.fixture
def api(tmp_path: Path) -> Api:
    return Api(tmp_path)


def test_a_patch_is_accepted_then_applied_and_read_back(api: Api) -> None:
    atom = api.atoms().json()["atoms"][0]
    r = api.client.patch(
        f"/v1/users/ana/atoms/{atom['id']}",
        headers={**ACME, "Idempotency-Key": "edit-1"},
        json={"text": "Ana is a chemist who drinks soy milk"},
    )
    assert r.status_code == 202 and r.json()["status"] == "pending" and r.json()["id"] == "edit-1"
    ((key, _),) = api.published()
    assert key == "acme/ana"  # the user's partition, like the turns
    assert api.client.get("/v1/operations/edit-1", headers=ACME).json()["status"] == "pending"
    api.work()
    done = api.client.get("/v1/operations/edit-1", headers=ACME)
    assert done.status_code == 200 and done.json()["status"] == "applied"
    texts = [a["content"] for a in api.atoms().json()["atoms"]]
    assert "Ana is a chemist who drinks soy milk" in texts and atom["content"] not in texts
    versions = api.client.get(f"/v1/users/ana/atoms/{atom['id']}/history", headers=ACME).json()
    assert [(v["made_by"], v["event"]) for v in versions] == [("extraction", "store"), ("manual", "edit")]


def test_the_same_key_with_the_same_body_is_the_same_operation_and_with_another_body_409(api: Api) -> None:
    body = {"text": "Ana likes sailing"}
    first = api.client.post("/v1/users/ana/memories", headers={**ACME, "Idempotency-Key": "k1"}, json=body)
    again = api.client.post("/v1/users/ana/memories", headers={**ACME, "Idempotency-Key": "k1"}, json=body)
    assert first.status_code == again.status_code == 202 and first.json()["id"] == again.json()["id"] == "k1"
    api.work()
    assert api.client.get("/v1/operations/k1", headers=ACME).json()["result"]["action"] == "store"
    after = api.client.post("/v1/users/ana/memories", headers={**ACME, "Idempotency-Key": "k1"}, json=body)
    assert after.status_code == 200 and after.json()["status"] == "applied" and api.published() == []
    clash = api.client.post(
        "/v1/users/ana/memories", headers={**ACME, "Idempotency-Key": "k1"}, json={"text": "Ana likes rowing"}
    )
    assert clash.status_code == 409 and "another body" in clash.json()["detail"]


def test_bad_input_is_refused_with_a_reason(api: Api) -> None:
    atom = api.atoms().json()["atoms"][0]["id"]
    assert api.client.patch("/v1/users/ana/atoms/a_missing", headers=ACME, json={"priority": 3}).status_code == 404
    assert api.client.delete("/v1/users/nobody", headers=ACME).status_code == 404
    assert api.client.delete("/v1/sessions/nowhere", headers=ACME).status_code == 404
    assert api.client.get("/v1/users/nobody/atoms", headers=ACME).status_code == 404
    assert api.client.get("/v1/operations/op-unknown", headers=ACME).status_code == 404
    for bad in ({"priority": 101}, {"type": "opinion"}, {"text": ""}, {}, {"colour": "red"}):
        r = api.client.patch(f"/v1/users/ana/atoms/{atom}", headers=ACME, json=bad)
        assert r.status_code == 422, (bad, r.text)
    assert api.client.post("/v1/users/ana/memories", headers=ACME, json={"text": "x" * 2001}).status_code == 422
    assert api.client.get("/v1/users/ana/atoms", headers=ACME, params={"cursor": "%%%"}).status_code == 400
    assert api.published() == []


def test_delete_with_wait_answers_once_applied(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    atom = api.atoms().json()["atoms"][0]["id"]
    published = api.bus.publish

    async def publish_and_apply(
        topic: str, records: list[tuple[str, bytes, int | None]], headers: object = None
    ) -> None:
        await published(topic, records)
        await api.worker.handle([RawRecord(v, k.encode(), topic, 0, 0) for k, v, _ in records])

    monkeypatch.setattr(api.bus, "publish", publish_and_apply)
    r = api.client.delete(f"/v1/users/ana/atoms/{atom}", headers=ACME, params={"wait": 5})
    assert r.status_code == 200 and r.json()["status"] == "applied"
    assert atom not in [a["id"] for a in api.atoms().json()["atoms"]]  # read-your-writes


def test_export_streams_a_bundle_with_its_manifest(api: Api) -> None:
    r = api.client.get("/v1/users/ana/export", headers=ACME)
    assert r.status_code == 200
    names = tarfile.open(fileobj=io.BytesIO(r.content)).getnames()
    assert names[-1] == "manifest.json" and any(n.startswith("user/records/") for n in names)


def test_import_through_the_api_lands_under_the_new_user(api: Api) -> None:
    bundle = api.client.get("/v1/users/ana/export", headers=ACME).content
    r = api.client.post("/v1/users/ana-copy/import", headers={**ACME, "Idempotency-Key": "imp-1"}, content=bundle)
    assert r.status_code == 202
    api.work()
    status = api.client.get("/v1/operations/imp-1", headers=ACME).json()
    assert status["status"] == "applied", status
    copy = [a["content"] for a in api.client.get("/v1/users/ana-copy/atoms", headers=ACME).json()["atoms"]]
    assert copy == [a["content"] for a in api.atoms().json()["atoms"]]


PATHS = st.sampled_from(
    [
        ("get", "/v1/users/ana/atoms"),
        ("get", "/v1/users/ana/atoms/{atom}/history"),
        ("get", "/v1/users/ana/export"),
        ("patch", "/v1/users/ana/atoms/{atom}"),
        ("delete", "/v1/users/ana/atoms/{atom}"),
        ("delete", "/v1/users/ana"),
        ("delete", "/v1/sessions/s"),
        ("get", "/v1/operations/{op}"),
    ]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=PATHS, wait=st.sampled_from([None, 0, 1]))
def test_another_tenants_key_never_reaches_these_atoms(api: Api, route: tuple[str, str], wait: int | None) -> None:
    atom = api.atoms().json()["atoms"][0]["id"]
    if not api.client.get("/v1/operations/seed", headers=ACME).status_code == 200:
        api.client.post("/v1/users/ana/memories", headers={**ACME, "Idempotency-Key": "seed"}, json={"text": "x y"})
        api.bus.sent.clear()
    method, path = route
    params = {"wait": wait} if wait is not None else {}
    r = api.client.request(
        method,
        path.format(atom=atom, op="seed"),
        headers=OTHER,
        params=params,
        json={"priority": 1} if method == "patch" else None,
    )
    assert r.status_code == 404, (route, r.status_code, r.text)
    assert api.published() == []
    assert atom in [a["id"] for a in api.atoms().json()["atoms"]]


def test_an_import_may_be_larger_than_an_event_batch_but_is_bounded_too(tmp_path: Path) -> None:
    settings_ = Settings(data_dir=tmp_path, api_keys={"acme": "key-acme"}, max_body_bytes=2048, max_import_bytes=8192)
    client = TestClient(create_api(settings_, ListBus()))
    big = b"x" * 4096
    assert client.post("/v1/users/ana/memories", headers=ACME, content=big).status_code == 413
    refused = client.post("/v1/users/ana/import", headers=ACME, content=big)  # within the limit, not a bundle
    assert refused.status_code == 400 and "bundle" in refused.json()["detail"]
    assert client.post("/v1/users/ana/import", headers=ACME, content=big * 3).status_code == 413


def test_an_operation_kafka_did_not_accept_fails_saying_so_and_a_retry_with_its_key_resubmits_it(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemoflow.errors import ServiceUnavailable

    async def down(topic: str, records: list[tuple[str, bytes, int | None]]) -> None:
        raise ServiceUnavailable("Kafka did not acknowledge the events: broker down")

    sent = api.bus.publish
    monkeypatch.setattr(api.bus, "publish", down)
    body, key = {"text": "Ana owns a red kayak"}, {**ACME, "Idempotency-Key": "kayak"}
    assert api.client.post("/v1/users/ana/memories", headers=key, json=body).status_code == 503
    failed = api.client.get("/v1/operations/kayak", headers=ACME).json()
    assert failed["status"] == "failed" and "not accepted" in failed["reason"]
    monkeypatch.setattr(api.bus, "publish", sent)
    retry = api.client.post("/v1/users/ana/memories", headers=key, json=body)
    assert retry.status_code == 202 and retry.json()["status"] == "pending"
    api.work()
    assert api.client.get("/v1/operations/kayak", headers=ACME).json()["status"] == "applied"


def test_forgetting_an_agent_removes_its_private_memory_and_nothing_shared(api: Api) -> None:
    """docs/concepts/scopes.md: what a named agent was told to do goes; what the user said about themselves stays."""
    for body, key in (
        ({"text": "Reply to Ana in French", "type": "instruction", "agent": "coder"}, "r1"),
        ({"text": "Ana sails on Sundays", "agent": "coder"}, "r2"),
        ({"text": "Greet Ana by name", "type": "instruction", "agent": "support"}, "r3"),
    ):
        sent = api.client.post("/v1/users/ana/memories", headers={**ACME, "Idempotency-Key": key}, json=body)
        assert sent.status_code == 202, sent.text
    api.work()
    before = {a["content"]: a.get("scope", "shared") for a in api.atoms().json()["atoms"]}
    api.files.write_atomic("acme/users/ana/agents/coder/persona.md", b"Reply in French")  # as the curator writes it
    api.files.write_atomic("acme/users/ana/agents/support/persona.md", b"Greet Ana by name")
    said = TurnEvent(tenant="acme", message_id="h1", user="ana", session="s-help", role="user", content="hi", ts=T0)
    L0Writer(api.files).write([said])  # ana's session "s" is the coder's, "s-help" the support agent's
    for session, agent in (("s", "coder"), ("s-help", "support")):
        api.files.write_atomic(f"acme/sessions/{session}/owner.json", f'{{"agent": "{agent}"}}'.encode())
        api.files.write_atomic(f"acme/sessions/{session}/refs/r1.md", b"tool output")
    assert [a["content"] for a in api.atoms(scope="agent:support").json()["atoms"]] == ["Greet Ana by name"]
    assert api.atoms(scope="agent:").status_code == 422  # not a scope
    assert before["Reply to Ana in French"] == "agent:coder" and before["Ana sails on Sundays"] == "shared"
    gone = api.client.delete("/v1/users/ana/agents/coder", headers={**ACME, "Idempotency-Key": "forget-1"})
    assert gone.status_code == 202
    api.work()
    status = api.client.get("/v1/operations/forget-1", headers=ACME).json()
    assert status["status"] == "applied"
    assert status["result"] == {
        "atoms_deleted": 1,
        "index_rows_removed": 1,
        "scene_files_removed": 1,
        "sessions_erased": 1,
    }
    assert api.files.list_dir("acme/users/ana/agents") == ["support"]
    assert not api.files.exists("acme/sessions/s/refs/r1.md") and api.files.exists("acme/sessions/s-help/refs/r1.md")
    after = {a["content"] for a in api.atoms().json()["atoms"]}
    assert after == set(before) - {"Reply to Ana in French"}
    assert {h.row.text for h in api.store.dense_search("acme", "ana", EMB.embed(["Ana"])[0], 20)} == after


def test_forgetting_an_agent_everywhere_forgets_it_for_every_user_once(api: Api) -> None:
    for user, key in (("ana", "r1"), ("bo", "r2")):
        body = {"text": f"Reply to {user} in French", "type": "instruction", "agent": "coder"}
        sent = api.client.post(f"/v1/users/{user}/memories", headers={**ACME, "Idempotency-Key": key}, json=body)
        assert sent.status_code == 202, sent.text
    api.work()
    gone = api.client.delete("/v1/agents/coder", headers={**ACME, "Idempotency-Key": "fire-coder"})
    assert gone.status_code == 202
    operations = {o["user"]: o["id"] for o in gone.json()["operations"]}
    assert set(operations) == {"ana", "bo"} and len(api.published()) == 2  # one operation per user, on its partition
    api.work()
    for user, oid in operations.items():
        status = api.client.get(f"/v1/operations/{oid}", headers=ACME).json()
        assert status["status"] == "applied" and status["result"]["atoms_deleted"] == 1, (user, status)
        atoms = api.client.get(f"/v1/users/{user}/atoms", headers=ACME).json()["atoms"]
        assert not [a for a in atoms if a.get("scope") == "agent:coder"]
    again = api.client.delete("/v1/agents/coder", headers={**ACME, "Idempotency-Key": "fire-coder"})
    assert {o["id"] for o in again.json()["operations"]} == set(operations.values())
    assert api.published() == []  # applied already: nothing published again
    assert api.client.delete("/v1/agents/coder", headers=OTHER).json()["operations"] == []  # another tenant's
