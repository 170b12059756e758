"""Memory governance on the real stack: Apache Kafka, the Faust worker, Ray actors, Ray Serve.

Operations go through ``mnemoflow.commands`` to the worker that owns the user and are applied in the extractor
deployment; the API answers with the operation id and, with ``wait``, once applied. Checked here: edit, remember,
delete with history and recall; export of a LoCoMo user and import under another tenant and user id with the
same top-10 for every question; the erase of a user whose turns and tool outputs then appear nowhere in the data
directory or the index file, and whose re-sent old events add nothing, while another user is untouched; two agents
of one user, each with a key bound to it, sharing the user's facts and keeping their instructions to themselves
until one agent is forgotten (docs/concepts/scopes.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from mnemoflow.cli.stack import Stack
from mnemoflow.config import Settings
from mnemoflow.memory.l0 import read_l0
from mnemoflow.memory.l1.state import load_triggers
from mnemoflow.replay import from_locomo
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import files_holding, l1_settled
from streams.broker_kafka import EmbeddedKafka

pytestmark = pytest.mark.integration

TENANT, KEY, OTHER_KEY = "acme", "key-acme", "key-other"
CODER_KEY, SUPPORT_KEY = "key-coder", "key-support"
EVAL = Path(__file__).resolve().parents[3] / "shared" / "eval"
T0 = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)
SECRET = [
    "My name is Ottoline Vardaman and I breed Quokkaflint hamsters in Zyxwick",
    "My bank PIN hint is the word Marrowbleak, do not tell anyone",
    "I am recovering from a Thrombulon infusion at the Dravenhold clinic",
]
MARKERS = [
    b"Ottoline",
    b"Vardaman",
    b"Quokkaflint",
    b"Zyxwick",
    b"Marrowbleak",
    b"Thrombulon",
    b"Dravenhold",
    b"Grizzlethorpe",
]


@pytest.fixture(scope="module")
def stack(apache_kafka: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not (EVAL / "locomo" / "locomo-dev.json").exists():
        pytest.skip(f"LoCoMo data not found under {EVAL}")
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("governance"),
        kafka_bootstrap=apache_kafka.bootstrap,
        api_port=0,
        api_keys={TENANT: KEY, "other": OTHER_KEY},
        agent_keys={
            TENANT: [
                {"key": CODER_KEY, "agent": "coder", "team": "eng"},
                {"key": SUPPORT_KEY, "agent": "support", "team": "help"},
            ]
        },
        embedder="minilm",
        l1_tick_seconds=1,
        curator_tick_seconds=0.5,
        l2_delay_after_l1_seconds=0.5,
        l2_min_interval_seconds=0,
        max_body_bytes=32 << 20,
    )
    st = Stack(settings)
    st.start()
    yield st
    st.stop()


def client(stack: Stack, key: str) -> httpx.Client:
    assert stack.info is not None
    return httpx.Client(base_url=stack.info.api_url, headers={"Authorization": f"Bearer {key}"}, timeout=120)


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[httpx.Client]:
    with client(stack, KEY) as c:
        yield c


def post_turns(api: httpx.Client, turns: list[dict]) -> None:
    for start in range(0, len(turns), 200):
        assert api.post("/v1/turns", json={"turns": turns[start : start + 200]}).status_code == 202


def settle(stack: Stack, users: list[str], sessions: set[tuple[str, str]], timeout: float = 300) -> None:
    """End the sessions, then wait until L1 has consumed every user's turns and no pass is pending or running."""
    with client(stack, KEY) as api:
        for session, user in sorted(sessions):
            assert api.post(f"/v1/sessions/{session}/end", json={"user": user}).status_code == 202
    files = LocalFileStore(stack.settings.data_dir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if l1_settled(files, TENANT, users):
            return
        time.sleep(0.5)
    raise AssertionError(f"L1 did not settle: {[load_triggers(files, TENANT, u) for u in users]}")


def applied(r: httpx.Response, api: httpx.Client | None = None) -> dict:
    """The operation's status once applied; a 202 (still pending after ``wait``) is polled through ``api``."""
    while r.status_code == 202 and api is not None:
        r = api.get(f"/v1/operations/{r.json()['id']}", params={"wait": 60})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "applied", body
    return body


def top10(api: httpx.Client, user: str, question: str) -> list[str]:
    hits = api.post("/v1/memory/search", json={"user": user, "query": question, "limit": 10})
    assert hits.status_code == 200, hits.text
    return [h["id"] for h in hits.json()]


def test_edit_remember_delete_through_the_commands_topic(stack: Stack, api: httpx.Client) -> None:
    turns = [
        {
            "message_id": f"pat-m{i}",
            "user": "pat",
            "session": "pat-s",
            "role": "user",
            "content": text,
            "ts": (T0 + timedelta(minutes=i)).isoformat(),
        }
        for i, text in enumerate(["I live in Ghent and I cycle to work", "I am vegetarian"])
    ]
    post_turns(api, turns)
    settle(stack, ["pat"], {("pat-s", "pat")})
    atoms = api.get("/v1/users/pat/atoms").json()["atoms"]
    assert atoms
    target = next(a for a in atoms if "Ghent" in a["content"])
    edit = applied(
        api.patch(
            f"/v1/users/pat/atoms/{target['id']}",
            params={"wait": 30},
            json={"text": "Pat lives in Bruges and cycles to work"},
        )
    )
    new_id = edit["result"]["atom_id"]
    assert top10(api, "pat", "Where does Pat live?")[0] == new_id
    assert target["id"] not in top10(api, "pat", "Ghent cycling")
    history = api.get(f"/v1/users/pat/atoms/{new_id}/history").json()
    assert [(v["made_by"], v["event"]) for v in history] == [("extraction", target["action"]), ("manual", "edit")]

    remembered = applied(
        api.post(
            "/v1/users/pat/memories",
            params={"wait": 30},
            json={"text": "Pat is allergic to penicillin", "priority": 95},
        )
    )
    assert remembered["result"]["action"] == "store"
    recall = api.post("/v1/recall", json={"user": "pat", "query": "Any allergies to medicine?"}).json()
    assert remembered["result"]["atom_id"] in [h["id"] for h in recall["hits"]]

    # The curator was told: the edited version reaches a scene, and after the delete it leaves scenes and persona.
    eventually(lambda: new_id in scene_atoms(api, "pat"), "the edited atom never reached a scene")
    applied(api.delete(f"/v1/users/pat/atoms/{new_id}", params={"wait": 30}))
    assert new_id not in [a["id"] for a in api.get("/v1/users/pat/atoms").json()["atoms"]]
    assert new_id not in top10(api, "pat", "Where does Pat live?")
    eventually(lambda: new_id not in scene_atoms(api, "pat"), "the deleted atom stayed in a scene")
    scenes = [api.get(f"/v1/users/pat/scenes/{s['filename']}").text for s in api.get("/v1/users/pat/scenes").json()]
    assert not any("Bruges" in text for text in scenes)
    eventually(lambda: "Bruges" not in api.get("/v1/users/pat/persona").text, "the persona kept the deleted atom")


def scene_atoms(api: httpx.Client, user: str) -> set[str]:
    return {i for scene in api.get(f"/v1/users/{user}/scenes").json() for i in scene["atom_ids"]}


def eventually(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def test_a_locomo_user_exported_and_imported_elsewhere_recalls_the_same_top10(stack: Stack, api: httpx.Client) -> None:
    sample = json.loads((EVAL / "locomo" / "locomo-dev.json").read_text())[0]
    replay = from_locomo(sample)
    turns = [t.model_dump(mode="json") for t in replay.items]
    users = sorted({t["user"] for t in turns})
    post_turns(api, turns)
    settle(stack, users, {(t["session"], t["user"]) for t in turns})
    user = users[0]
    bundle = api.get(f"/v1/users/{user}/export")
    assert bundle.status_code == 200
    with client(stack, OTHER_KEY) as other:
        r = other.post("/v1/users/imported/import", params={"wait": 60}, content=bundle.content)
        assert applied(r, other)["result"]["atoms_indexed"] > 0
        questions = [q["question"] for q in sample["qa"]]
        same = sum(top10(api, user, q) == top10(other, "imported", q) for q in questions)
        assert same == len(questions), f"{same}/{len(questions)} questions with an identical top-10"
        applied(other.delete("/v1/users/imported", params={"wait": 60}), other)


def test_an_erased_user_leaves_no_trace_and_old_events_do_not_bring_them_back(stack: Stack, api: httpx.Client) -> None:
    turns = [
        {
            "message_id": f"otto-m{i}",
            "user": "otto",
            "session": "otto-s",
            "role": "user",
            "content": text,
            "ts": (T0 + timedelta(minutes=i)).isoformat(),
        }
        for i, text in enumerate(SECRET)
    ]
    results = [
        {
            "tool_call_id": "otto-c1",
            "session": "otto-s",
            "user": "otto",
            "tool_name": "search",
            "arguments": {"q": "Grizzlethorpe"},
            "content": "Grizzlethorpe records for Vardaman: 3 hamsters",
            "ts": T0.isoformat(),
        }
    ]
    post_turns(api, turns)
    assert api.post("/v1/tool-results", json={"results": results}).status_code == 202
    keep = [
        {
            "message_id": f"kim-m{i}",
            "user": "kim",
            "session": "kim-s",
            "role": "user",
            "content": text,
            "ts": T0.isoformat(),
        }
        for i, text in enumerate(["I am Kim and I sail a boat called Petrel"])
    ]
    post_turns(api, keep)
    settle(stack, ["otto", "kim"], {("otto-s", "otto"), ("kim-s", "kim")})
    root = stack.settings.data_dir
    deadline = time.monotonic() + 60
    while not (root / TENANT / "sessions/otto-s/refs/otto-c1.md").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert files_holding(root, MARKERS), "the markers must be visible before the erase for this check to mean anything"
    kim_before = api.get("/v1/users/kim/atoms").json()["atoms"]

    erased = applied(api.delete("/v1/users/otto", params={"wait": 60}), api)
    assert erased["result"]["sessions_erased"] == 1 and erased["result"]["index_rows_removed"] > 0
    time.sleep(2)  # let the curator notice nothing is left: it must not bring files back
    assert files_holding(root, MARKERS) == {}
    assert api.get("/v1/users/otto/atoms").status_code == 404

    # The same events again, as Kafka would re-deliver them or a client re-send them.
    post_turns(api, turns)
    assert api.post("/v1/tool-results", json={"results": results}).status_code == 202
    with client(stack, KEY) as again:
        assert again.post("/v1/sessions/otto-s/end", json={"user": "otto"}).status_code == 202
    time.sleep(8)
    assert files_holding(root, MARKERS) == {}
    assert read_l0(LocalFileStore(root), TENANT, "otto") == []
    assert api.get("/v1/users/kim/atoms").json()["atoms"] == kim_before


INSTRUCTION = "From now on always answer me in short bullet points."
FACT = "I work as a paramedic on night shifts in Leeds."


def searched(stack: Stack, key: str, query: str, **body: str) -> httpx.Response:
    with client(stack, key) as c:
        return c.post("/v1/memory/search", json={"user": "nia", "query": query, "limit": 10, **body})


def scopes_found(stack: Stack, key: str, query: str, **body: str) -> dict[str, str]:
    response = searched(stack, key, query, **body)
    assert response.status_code == 200, response.text
    return {h["text"]: h["scope"] for h in response.json() if h["text"] in (INSTRUCTION, FACT)}


def test_two_agents_of_one_user_share_its_facts_and_keep_their_instructions(stack: Stack, api: httpx.Client) -> None:
    """Each agent submits with its own bound key; L1 on the real stack scopes the fact as shared and the instruction
    as the coder's; recall, drill-down and forgetting the coder then hold what each key may see."""
    said = [(CODER_KEY, "s-code", "n1", INSTRUCTION), (SUPPORT_KEY, "s-help", "n2", FACT)]
    for i, (key, session, message, text) in enumerate(said):
        turn = {"message_id": message, "user": "nia", "session": session, "role": "user", "content": text}
        with client(stack, key) as c:
            submitted = c.post("/v1/turns", json={"turns": [{**turn, "ts": (T0 + timedelta(minutes=i)).isoformat()}]})
            assert submitted.status_code == 202, submitted.text
    settle(stack, ["nia"], {("s-code", "nia"), ("s-help", "nia")})

    query = "How should answers be written for the paramedic from Leeds?"
    assert scopes_found(stack, CODER_KEY, query) == {INSTRUCTION: "agent:coder", FACT: "shared"}
    assert scopes_found(stack, SUPPORT_KEY, query) == {FACT: "shared"}  # heard by support, still shared
    assert scopes_found(stack, KEY, query) == {FACT: "shared"}  # an admin key naming no agent: shared only
    assert scopes_found(stack, KEY, query, agent="coder") == {INSTRUCTION: "agent:coder", FACT: "shared"}
    refused = searched(stack, CODER_KEY, query, agent="support")
    assert refused.status_code == 404 and "no agent support for this key" in refused.json()["detail"]
    with client(stack, CODER_KEY) as coder:
        recall = coder.post("/v1/recall", json={"user": "nia", "query": query}).json()
        assert "[instruction, private] " + INSTRUCTION in recall["prepend_context"]
        # the curator writes each scope's scenes and persona from that scope's atoms: the coder's own persona
        eventually(lambda: coder.get("/v1/users/nia/persona", params={"scope": "agent:coder"}).status_code == 200,
                   "no persona for the coder's scope")  # fmt: skip
        assert INSTRUCTION in coder.get("/v1/users/nia/persona", params={"scope": "agent:coder"}).text
        context = coder.post("/v1/recall", json={"user": "nia", "query": query}).json()["system_context"]
        assert "### Known to agent coder only" in context and "bullet points" in context
    with client(stack, SUPPORT_KEY) as support:
        assert support.get("/v1/users/nia/persona", params={"scope": "agent:coder"}).status_code == 404
        context = support.post("/v1/recall", json={"user": "nia", "query": query}).json()["system_context"]
        assert "bullet" not in context and "agent coder" not in context
    eventually(lambda: api.get("/v1/users/nia/persona").status_code == 200, "no shared persona")
    shared = api.get("/v1/users/nia/persona").text
    assert "paramedic" in shared and INSTRUCTION not in shared  # the shared persona never holds the coder's

    atoms = {a["content"]: a["id"] for a in api.get("/v1/users/nia/atoms").json()["atoms"]}
    with client(stack, SUPPORT_KEY) as support:
        assert support.get(f"/v1/users/nia/atoms/{atoms[INSTRUCTION]}").status_code == 404
        assert support.get(f"/v1/users/nia/atoms/{atoms[FACT]}").status_code == 200

    forgotten = applied(api.delete("/v1/users/nia/agents/coder", params={"wait": 60}), api)
    assert forgotten["result"]["scene_files_removed"] >= 1
    assert api.get("/v1/users/nia/persona", params={"scope": "agent:coder"}).status_code == 404
    assert scopes_found(stack, CODER_KEY, query) == {FACT: "shared"}  # its private memory is gone, the fact is not
    remaining = api.get("/v1/users/nia/atoms").json()["atoms"]
    assert [a["content"] for a in remaining if a["content"] in (INSTRUCTION, FACT)] == [FACT]
