"""Keys bound to an agent or a team through the HTTP API (docs/concepts/scopes.md): what they submit as, what they
recall, and the 404 / 403 they get for anything else."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient
from pydantic import ValidationError

from mnemoflow.config import TOPIC_TURNS, Settings
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.events import TurnEvent
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.ports.vectors import AtomRow
from mnemoflow.scopes import Caller
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ListBus
from serving.api import create_api

EMB = HashingEmbedder(64)
T0 = datetime(2026, 4, 2, 15, 30, tzinfo=UTC)
KEYS = {
    "api_keys": {"acme": "k-admin", "other": "k-other"},
    "agent_keys": {
        "acme": [
            {"key": "k-coder", "agent": "coder", "team": "eng"},
            {"key": "k-support", "agent": "support", "team": "help"},
            {"key": "k-eng", "team": "eng"},
        ]
    },
}
ATOMS = [  # id, text, scope, the L0 message it came from
    ("a1", "Ana drinks oat milk", "shared", "m1"),
    ("a2", "Answer Ana about milk in short bullet points", "agent:coder", "m1"),
    ("a3", "Ana asked support about a refund for the milk frother", "agent:support", "m2"),
    ("a4", "Ana's milk order ships on Fridays", "team:eng", "m3"),
]
SAID = [  # id, agent, team, text
    ("m1", "coder", "eng", "I drink oat milk every morning, keep answers short"),
    ("m2", "support", "help", "the milk frother broke and I want a refund"),
    ("m3", None, None, "milk is on my shopping list"),
]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def setup(tmp_path: Path) -> tuple[TestClient, ListBus]:
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    store.upsert(
        [
            AtomRow(
                id=i,
                tenant="acme",
                user="ana",
                type="persona",
                priority=60,
                text=text,
                vector=EMB.embed([text])[0],
                created=T0,
                updated=T0 + timedelta(days=1),
                scope=scope,
                source_message_ids=[source],
            )
            for i, text, scope, source in ATOMS
        ]
    )
    files, bus = LocalFileStore(tmp_path), ListBus()
    said = [
        TurnEvent(
            tenant="acme", message_id=m, user="ana", session=f"s-{agent}", role="user", content=text, ts=T0
        ).model_copy(update={"agent": agent, "team": team})
        for m, agent, team, text in SAID
    ]
    L0Writer(files).write(said)
    recaller = Recaller(store=store, embedder=EMB, files=files)
    app = create_api(Settings(data_dir=tmp_path, **KEYS), bus, recaller_factory=lambda: recaller)
    return TestClient(app), bus


def found(client: TestClient, key: str, **body: str) -> set[str]:
    response = client.post("/v1/memory/search", json={"user": "ana", "query": "milk", **body}, headers=auth(key))
    assert response.status_code == 200, response.text
    return {h["id"] for h in response.json()}


def test_a_bound_key_recalls_shared_its_teams_and_its_own_memory_and_nothing_else(setup) -> None:
    client, _ = setup
    assert found(client, "k-coder") == {"a1", "a2", "a4"}
    assert found(client, "k-support") == {"a1", "a3"}
    assert found(client, "k-eng") == {"a1", "a4"}  # a team key acts as the team, with no agent of its own
    recall = client.post("/v1/recall", json={"user": "ana", "query": "milk for Ana"}, headers=auth("k-coder")).json()
    assert {(h["id"], h["scope"]) for h in recall["hits"]} == {
        ("a1", "shared"),
        ("a2", "agent:coder"),
        ("a4", "team:eng"),
    }
    assert "refund" not in recall["prepend_context"]


def test_whatever_the_body_says_a_bound_key_reads_no_other_agents_or_teams_memory(setup) -> None:
    client, _ = setup
    for key, body in (
        ("k-coder", {"agent": "support"}),
        ("k-coder", {"team": "help"}),
        ("k-eng", {"agent": "coder"}),
        ("k-support", {"agent": "coder", "team": "eng"}),
    ):
        for path in ("/v1/memory/search", "/v1/recall"):
            response = client.post(path, json={"user": "ana", "query": "milk", **body}, headers=auth(key))
            assert response.status_code == 404 and "for this key" in response.json()["detail"]
    assert found(client, "k-coder", agent="coder", team="eng") == {"a1", "a2", "a4"}  # naming itself is fine


def test_an_admin_key_recalls_as_the_agent_it_names_and_as_the_default_agent_when_it_names_none(setup) -> None:
    """An old client (an admin key, no agent) recalls shared memory only: it never gets a named agent's notes."""
    client, _ = setup
    assert found(client, "k-admin") == {"a1"}
    assert found(client, "k-admin", agent="support") == {"a1", "a3"}
    assert found(client, "k-admin", agent="coder", team="eng") == {"a1", "a2", "a4"}
    assert found(client, "k-other") == set()  # another tenant


def test_a_bound_key_submits_as_itself_and_never_as_another_agent(setup) -> None:
    client, bus = setup
    turn = {"message_id": "m1", "user": "ana", "session": "s1", "role": "user", "content": "hi"}
    assert client.post("/v1/turns", json={"turns": [turn]}, headers=auth("k-coder")).status_code == 202
    [(topic, [(_, value, _)])] = bus.sent
    event = json.loads(value)
    assert (topic, event["tenant"], event["agent"], event["team"]) == (TOPIC_TURNS, "acme", "coder", "eng")
    other = {**turn, "agent": "support"}
    refused = client.post("/v1/turns", json={"turns": [turn, other]}, headers=auth("k-coder"))
    assert refused.status_code == 404 and "no agent support for this key" in refused.json()["detail"]
    tool = {"tool_call_id": "c1", "session": "s1", "tool_name": "ls", "content": "", "team": "help"}
    assert client.post("/v1/tool-results", json={"results": [tool]}, headers=auth("k-coder")).status_code == 404
    assert len(bus.sent) == 1  # nothing of a refused batch was published
    admin = client.post("/v1/turns", json={"turns": [other]}, headers=auth("k-admin"))
    assert admin.status_code == 202 and json.loads(bus.sent[-1][1][0][1])["agent"] == "support"
    who = client.get("/v1/whoami", headers=auth("k-eng")).json()
    assert who == {"tenant": "acme", "agent": None, "team": "eng"}


def test_conversation_search_and_drill_down_show_a_bound_key_only_the_messages_it_may_read(setup) -> None:
    """The raw conversation belongs to the agent that had it: a shared fact drills down to the messages the caller
    may read, and says how many it may not."""
    client, _ = setup

    def said(key: str, **body: str) -> set[str]:
        response = client.post(
            "/v1/conversations/search", json={"user": "ana", "query": "milk", **body}, headers=auth(key)
        )
        assert response.status_code == 200, response.text
        return {h["message"]["id"] for h in response.json()}

    assert said("k-coder") == {"m1", "m3"} and said("k-support") == {"m2", "m3"} and said("k-eng") == {"m3"}
    assert said("k-admin") == {"m3"} and said("k-admin", agent="coder", team="eng") == {"m1", "m3"}
    assert (
        client.post(
            "/v1/conversations/search",
            json={"user": "ana", "query": "milk", "agent": "coder"},
            headers=auth("k-support"),
        ).status_code
        == 404
    )

    def drill(key: str, atom: str) -> tuple[int, list[str], int]:
        response = client.get(f"/v1/users/ana/atoms/{atom}", headers=auth(key))
        body = response.json() if response.status_code == 200 else {"messages": [], "hidden": 0}
        return response.status_code, [m["id"] for m in body["messages"]], body["hidden"]

    assert drill("k-coder", "a1") == (200, ["m1"], 0)
    assert drill("k-support", "a1") == (200, [], 1)  # a shared fact, told to the coder
    assert drill("k-support", "a2")[0] == 404  # the coder's own note: as if it did not exist
    assert drill("k-admin", "a2") == (200, ["m1"], 0)


@pytest.mark.parametrize("path", ["/v1/users/ana/conversations", "/v1/users/ana/atoms", "/v1/users/ana/export"])
def test_routes_that_read_unfiltered_need_an_admin_key(setup, path: str) -> None:
    client, _ = setup
    response = client.get(path, headers=auth("k-coder"))
    assert response.status_code == 403 and "needs a tenant admin key" in response.json()["detail"]
    assert client.get(path, headers=auth("k-admin")).status_code != 403


def test_persona_and_scenes_of_each_scope_go_to_the_keys_that_may_see_it(setup, tmp_path: Path) -> None:
    client, _ = setup
    files = LocalFileStore(tmp_path)
    files.write_atomic("acme/users/ana/persona.md", b"Ana drinks oat milk")
    files.write_atomic("acme/users/ana/agents/coder/persona.md", b"Answer Ana in bullet points")
    files.write_atomic("acme/users/ana/agents/coder/scenes/回答-格式.md", "用要点回答".encode())

    def get(path: str, key: str, scope: str | None = None) -> tuple[int, str]:
        response = client.get(path, params={"scope": scope} if scope else {}, headers=auth(key))
        return response.status_code, response.text

    assert get("/v1/users/ana/persona", "k-coder") == (200, "Ana drinks oat milk")
    assert get("/v1/users/ana/persona", "k-coder", "agent:coder") == (200, "Answer Ana in bullet points")
    assert get("/v1/users/ana/scenes/回答-格式.md", "k-coder", "agent:coder") == (200, "用要点回答")
    assert get("/v1/users/ana/persona", "k-support", "agent:coder")[0] == 404  # as if there were none
    assert get("/v1/users/ana/scenes/回答-格式.md", "k-eng", "agent:coder")[0] == 404
    assert get("/v1/users/ana/persona", "k-admin", "agent:coder")[0] == 200  # admin keys see every scope
    assert get("/v1/users/ana/persona", "k-admin", "agents:coder")[0] == 422
    assert get("/v1/users/ana/scenes/..md", "k-coder")[0] == 400


@pytest.mark.parametrize(
    ("agent_keys", "reason"),
    [
        ({"acme": [{"key": "k-admin", "agent": "coder"}]}, "admin key of tenant 'acme' and the key of agent coder"),
        ({"acme": [{"key": "k", "agent": "a"}, {"key": "k", "agent": "b"}]}, "are the same"),
        ({"acme": [{"key": "k"}]}, "names its agent or its team"),
        ({"acme": [{"key": "", "team": "eng"}]}, "is empty"),
        ({"acme": [{"key": "k", "agent": "../x"}]}, "invalid id"),
    ],
)
def test_agent_keys_are_refused_when_they_bind_nothing_or_are_held_twice(agent_keys: dict, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        Settings(api_keys={"acme": "k-admin"}, agent_keys=agent_keys)


def test_agent_keys_reach_a_child_process_intact() -> None:
    settings = Settings(**KEYS)
    env = settings.to_env()
    assert json.loads(env["MNEMOFLOW_AGENT_KEYS"])["acme"][0] == {"key": "k-coder", "agent": "coder", "team": "eng"}


def test_a_remembered_memory_takes_its_scope_as_an_extracted_one_would() -> None:
    from serving.routes_governance import MemoryIn
    from serving.security import acting

    def scope(caller: Caller, **body: str) -> str:
        (acted,) = acting(caller, [MemoryIn.model_validate(body)])
        return acted.scope()

    admin, coder = Caller(tenant="acme"), Caller(tenant="acme", agent="coder", team="eng")
    assert scope(admin, text="Ana likes tea") == "shared"
    assert scope(admin, text="Ana likes tea", agent="coder") == "shared"  # a fact about the user
    assert scope(admin, text="Reply in French", type="instruction", agent="coder") == "agent:coder"
    assert scope(admin, text="Ana likes tea", agent="coder", team="eng", visibility="team") == "team:eng"
    assert scope(coder, text="Reply in French", type="instruction") == "agent:coder"  # the key's agent
    assert scope(coder, text="Ana likes tea", visibility="team") == "team:eng"  # need not repeat its team
    with pytest.raises(HTTPException, match="visibility 'team' needs a team") as refused:
        scope(admin, text="Ana likes tea", agent="coder", visibility="team")
    assert refused.value.status_code == 422
    with pytest.raises(HTTPException, match="no agent support for this key") as hidden:
        scope(coder, text="Ana likes tea", agent="support")
    assert hidden.value.status_code == 404


def test_a_bound_key_asks_for_visibility_without_naming_itself_and_remembers_as_itself(setup) -> None:
    client, bus = setup
    turn = {"message_id": "v1", "user": "ana", "session": "s1", "role": "user", "content": "hi", "visibility": "team"}
    assert client.post("/v1/turns", json={"turns": [turn]}, headers=auth("k-coder")).status_code == 202
    event = json.loads(bus.sent[-1][1][0][1])
    assert (event["agent"], event["team"], event["visibility"]) == ("coder", "eng", "team")
    refused = client.post("/v1/turns", json={"turns": [{**turn, "visibility": "agent"}]}, headers=auth("k-eng"))
    assert refused.status_code == 422 and "visibility 'agent' needs an agent" in refused.json()["detail"]
    body = {"text": "Reply in French", "type": "instruction"}
    sent = client.post("/v1/users/ana/memories", json=body, headers=auth("k-coder"))
    assert sent.status_code == 202, sent.text
    assert json.loads(bus.sent[-1][1][0][1])["op"]["scope"] == "agent:coder"
    other = client.post("/v1/users/ana/memories", json={**body, "agent": "support"}, headers=auth("k-coder"))
    assert other.status_code == 404


def test_a_session_belongs_to_the_agent_of_its_first_tool_result_and_other_bound_keys_get_404(
    setup, tmp_path: Path
) -> None:
    from mnemoflow.events import ToolResultEvent
    from mnemoflow.offload.owner import owner_of, record_owners

    client, _ = setup
    files = LocalFileStore(tmp_path)

    def result(call: str, session: str, agent: str | None, team: str | None) -> ToolResultEvent:
        return ToolResultEvent(
            tenant="acme", tool_call_id=call, session=session, tool_name="ls", arguments="", content="x", ts=T0
        ).model_copy(update={"agent": agent, "team": team})

    record_owners(files, [result("c1", "s-code", "coder", "eng"), result("c2", "s-code", "support", "help")])
    record_owners(files, [result("c3", "s-code", "support", "help"), result("c4", "s-eng", None, "eng")])
    record_owners(files, [result("c5", "s-free", None, None)])
    assert owner_of(files, "acme", "s-code").agent == "coder"  # the first one, never replaced
    assert owner_of(files, "acme", "s-free") is None

    def status(key: str, session: str) -> int:
        return client.get(f"/v1/sessions/{session}/offload", headers=auth(key)).status_code

    assert [status("k-coder", s) for s in ("s-code", "s-eng", "s-free")] == [200, 200, 200]
    assert [status("k-support", s) for s in ("s-code", "s-eng", "s-free")] == [404, 404, 200]
    assert [status("k-eng", s) for s in ("s-code", "s-eng", "s-free")] == [404, 200, 200]
    assert [status("k-admin", s) for s in ("s-code", "s-eng", "s-free")] == [200, 200, 200]
    refused = client.get("/v1/sessions/s-code/canvases", headers=auth("k-support"))
    assert refused.status_code == 404 and "no session s-code for this key" in refused.json()["detail"]
