"""Skill routes and recall's skills index through the HTTP API, with agent-bound keys (the real stack runs them in
tests/integration)."""

import io
import tarfile
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mnemoflow.client import Client
from mnemoflow.config import Settings
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.offload.owner import owner_path
from mnemoflow.retry import RetryPolicy
from mnemoflow.skills.index import SkillsIndexSource
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ListBus
from serving.api import create_api
from tests.skill_tasks import EN, ZH, replayed

ADMIN = {"Authorization": "Bearer k-admin"}
CODER = {"Authorization": "Bearer k-coder"}
SUPPORT = {"Authorization": "Bearer k-support"}
BETA = {"Authorization": "Bearer k-beta"}
EMB = HashingEmbedder(64)


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    files = replayed(tmp_path, "s1", EN, tenant="acme")
    replayed(tmp_path, "s2", ZH, tenant="acme")
    files.write_atomic(owner_path("acme", "s2"), b'{"agent": "coder", "team": "eng"}')
    settings = Settings(
        data_dir=tmp_path,
        api_keys={"acme": "k-admin", "beta": "k-beta"},
        agent_keys={"acme": [{"key": "k-coder", "agent": "coder"}, {"key": "k-support", "agent": "support"}]},
    )
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    files = LocalFileStore(tmp_path)
    return TestClient(
        create_api(
            settings,
            ListBus(),
            recaller_factory=lambda: Recaller(
                store=store, embedder=EMB, files=files, skills=SkillsIndexSource(files).index
            ),
        )
    )


def test_distil_list_read_edit_delete(client: TestClient) -> None:
    learnt = client.post("/v1/sessions/s1/skills", json={}, headers=ADMIN).json()
    assert [(x["task"], x["action"]) for x in learnt] == [("s1#001", "store")]
    assert client.post("/v1/sessions/s1/skills", json={}, headers=ADMIN).json()[0]["action"] == "skip"
    (listed,) = client.get("/v1/skills", headers=ADMIN).json()
    name = listed["name"]
    assert listed["area"] == "dateparse" and listed["sources"] == ["s1#001"] and listed["version"] == 1
    text = client.get(f"/v1/skills/{name}", headers=ADMIN).text
    assert "## Steps" in text and "[from s1#001-N" in text
    edited = text.replace("## Pitfalls", "## Pitfalls\n- check the tz database first [from s1#001-N1]")
    out = client.put(f"/v1/skills/{name}", content=edited, headers=ADMIN).json()
    assert out["version"] == 2 and out["engine"] == "edited"
    assert "check the tz database" in client.get(f"/v1/skills/{name}", headers=ADMIN).text
    assert client.get(f"/v1/skills/{name}/history", headers=ADMIN).json() == [1]
    bad = client.put(f"/v1/skills/{name}", content="no header", headers=ADMIN)
    assert bad.status_code == 422 and "not a skill file" in bad.json()["detail"]
    other = client.put(f"/v1/skills/{name}", content=edited.replace(f"name: {name}", "name: other"), headers=ADMIN)
    assert other.status_code == 422
    assert client.delete(f"/v1/skills/{name}", headers=ADMIN).status_code == 204
    assert client.get(f"/v1/skills/{name}", headers=ADMIN).status_code == 404
    assert client.delete(f"/v1/skills/{name}", headers=ADMIN).status_code == 404


def test_a_session_owned_by_an_agent_makes_private_skills_that_other_agents_do_not_see(client: TestClient) -> None:
    assert client.post("/v1/sessions/s2/skills", json={}, headers=SUPPORT).status_code == 404  # not its session
    (learnt,) = client.post("/v1/sessions/s2/skills", json={}, headers=CODER).json()
    assert learnt["action"] == "store"
    assert client.get("/v1/skills", headers=CODER).json() == []  # the shared set is empty
    (mine,) = client.get("/v1/skills", params={"scope": "agent:coder"}, headers=CODER).json()
    assert client.get("/v1/skills", params={"scope": "agent:coder"}, headers=SUPPORT).status_code == 404
    assert client.get(f"/v1/skills/{mine['name']}", params={"scope": "agent:coder"}, headers=SUPPORT).status_code == 404
    assert client.get("/v1/skills", params={"scope": "team:eng"}, headers=ADMIN).status_code == 422
    # Recall shows the coder its own skill in the index (in Chinese: the skill is), the support agent nothing.
    coder = client.post("/v1/recall", json={"user": "ana", "query": "日期 时区"}, headers=CODER).json()
    assert "<skills-index>" in coder["system_context"] and mine["name"] in coder["system_context"]
    assert "## 技能" in coder["system_context"] and "skill_read" in coder["system_context"]
    support = client.post("/v1/recall", json={"user": "ana", "query": "日期 时区"}, headers=SUPPORT).json()
    assert "<skills-index>" not in support["system_context"]


def test_recall_index_is_byte_stable_until_a_skill_changes(client: TestClient) -> None:
    """A read counts a use (in the file and the metrics) without changing the index: uses are not in it."""
    client.post("/v1/sessions/s1/skills", json={}, headers=ADMIN)
    first = client.post("/v1/recall", json={"user": "ana", "query": "timezone crash"}, headers=ADMIN).json()
    (listed,) = client.get("/v1/skills", headers=ADMIN).json()
    for _ in range(2):
        assert client.get(f"/v1/skills/{listed['name']}", headers=ADMIN).status_code == 200
    assert "uses: 3" in client.get(f"/v1/skills/{listed['name']}", headers=ADMIN).text  # this read counted too
    again = client.post("/v1/recall", json={"user": "ana", "query": "something else entirely"}, headers=ADMIN).json()
    assert "<skills-index>" in first["system_context"] and first["system_context"] == again["system_context"]
    assert client.get(f"/v1/skills/{listed['name']}/history", headers=ADMIN).json() == []  # a use is no version
    metrics = client.get("/metrics").text
    assert 'mnemoflow_skill_reads_total{scope="shared"} 3.0' in metrics
    assert 'mnemoflow_api_skill_tasks_total{action="store"} 1.0' in metrics
    client.delete(f"/v1/skills/{listed['name']}", headers=ADMIN)
    after = client.post("/v1/recall", json={"user": "ana", "query": "timezone crash"}, headers=ADMIN).json()
    assert "<skills-index>" not in after["system_context"]


def test_the_sdk_owns_skills_end_to_end(client: TestClient) -> None:
    with Client("", "k-admin", http=client, retry=RetryPolicy(attempts=1)) as mf:
        (learnt,) = mf.distil_skills("s1")
        assert learnt.action == "store" and learnt.skill is not None
        (listed,) = mf.skills()
        assert listed.name == learnt.skill and mf.search_skills("timezone offset crash")[0].name == listed.name
        text = mf.skill(listed.name)
        assert (
            mf.edit_skill(listed.name, text.replace("## Steps", "## Steps\n1. Read the issue [from s1#001-N1]")).version
            == 2
        )
        assert mf.skill_history(listed.name) == [1]
        mf.delete_skill(listed.name)
        assert mf.skills() == []
        with pytest.raises(ValueError, match="is not a skill name"):
            mf.skill("../x")


def test_a_session_end_distils_its_tasks_in_the_background(client: TestClient) -> None:
    assert client.post("/v1/sessions/s1/end", json={"user": "ana"}, headers=ADMIN).status_code == 202
    deadline = time.monotonic() + 10
    while not client.get("/v1/skills", headers=ADMIN).json() and time.monotonic() < deadline:
        time.sleep(0.05)
    (listed,) = client.get("/v1/skills", headers=ADMIN).json()
    assert listed["sources"] == ["s1#001"]


def _sets(bundle: bytes) -> list[str]:
    """The skill set of each member of a bundle (``shared`` or ``agent``), then the manifest."""
    return [m.split("/")[1] if "/" in m else m for m in tarfile.open(fileobj=io.BytesIO(bundle)).getnames()]


def test_skills_move_to_another_tenant_as_a_bundle(client: TestClient, tmp_path: Path) -> None:
    client.post("/v1/sessions/s1/skills", json={}, headers=ADMIN)  # a shared skill
    client.post("/v1/sessions/s2/skills", json={}, headers=CODER)  # the coder's own
    bundle = client.get("/v1/skills/export", headers=ADMIN).content
    assert _sets(bundle) == ["shared", "agent", "manifest.json"]
    learnt = client.post("/v1/skills/import", content=bundle, headers=BETA).json()
    assert [x["action"] for x in learnt] == ["store", "store"]
    copied = {p.relative_to(tmp_path / "beta"): p.read_bytes() for p in (tmp_path / "beta/skills").rglob("*.md")}
    assert copied == {
        p.relative_to(tmp_path / "acme"): p.read_bytes() for p in (tmp_path / "acme/skills").rglob("*.md")
    }
    again = client.post("/v1/skills/import", content=bundle, headers=BETA).json()
    assert {x["action"] for x in again} == {"skip"}  # a second import adds nothing
    support = client.get("/v1/skills/export", headers=SUPPORT).content
    assert _sets(support) == ["shared", "manifest.json"]  # the shared skills, not the coder's
    assert client.post("/v1/skills/import", content=bundle, headers=SUPPORT).status_code == 404  # holds agent:coder
    tampered = client.post("/v1/skills/import", content=bundle.replace(b"## Steps", b"## STEPS", 1), headers=BETA)
    assert tampered.status_code == 400 and "does not match its checksum" in tampered.json()["detail"]
    with Client("", "k-beta", http=client, retry=RetryPolicy(attempts=1)) as beta:  # the SDK's calls (it closes http)
        (learnt_again,) = beta.import_skills(beta.export_skills(scope="agent:coder"))
        assert learnt_again.action == "skip" and learnt_again.task.startswith("skills/agent/coder/")
