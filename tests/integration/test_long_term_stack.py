"""Long-term memory on the real stack (tansu, Faust, Ray, Serve): LoCoMo turns in, atoms, scenes, persona out."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemoflow.cli.stack import Stack
from mnemoflow.config import Settings
from mnemoflow.memory.l0 import read_l0
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.l1.state import load_triggers
from mnemoflow.memory.links import visible_len
from mnemoflow.memory.persona.generate import PersonaStore
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.replay import from_locomo
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import l1_settled

pytestmark = pytest.mark.integration

TENANT, KEY = "acme", "key-acme"
EVAL = Path(__file__).resolve().parents[3] / "shared" / "eval"
USERS = 50


def locomo_sample() -> dict:
    return json.loads((EVAL / "locomo" / "locomo-dev.json").read_text())[0]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not (EVAL / "locomo" / "locomo-dev.json").exists():
        pytest.skip(f"LoCoMo data not found under {EVAL}")
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("ltm"),
        api_port=0,
        api_keys={TENANT: KEY},
        embedder="minilm",
        l2_delay_after_l1_seconds=0.5,
        l2_min_interval_seconds=0,
        curator_tick_seconds=0.5,
        l1_tick_seconds=1,
    )
    st_ = Stack(settings)
    st_.start()
    yield st_
    st_.stop()


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.info.api_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as c:
        yield c


def post(api: httpx.Client, items: list) -> None:
    for start in range(0, len(items), 200):
        body = {"turns": [t.model_dump(mode="json") for t in items[start : start + 200]]}
        assert api.post("/v1/turns", json=body).status_code == 202


def settled(files: LocalFileStore, users: list[str], timeout: float = 300) -> None:
    """Wait until L1 has consumed every user's turns and no pass is pending or running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if l1_settled(files, TENANT, users):
            return
        time.sleep(0.5)
    raise AssertionError(f"L1 did not settle: {[load_triggers(files, TENANT, u) for u in users]}")


def end_sessions(api: httpx.Client, pairs: set[tuple[str, str]]) -> None:
    for session, user in sorted(pairs):
        assert api.post(f"/v1/sessions/{session}/end", json={"user": user}).status_code == 202


def test_locomo_turns_become_atoms_with_provenance_scenes_and_persona(stack: Stack, api: httpx.Client) -> None:
    replay = from_locomo(locomo_sample())
    turns = replay.items
    users = sorted({t.user for t in turns})
    post(api, turns)
    time.sleep(2)
    end_sessions(api, {(t.session, t.user) for t in turns})
    files = LocalFileStore(stack.settings.data_dir)
    settled(files, users)

    atoms = {}
    for user in users:
        l0_ids = {m.id for m in read_l0(files, TENANT, user, limit=10**6)}
        live = RecordLog(files, TENANT, user).read(live_only=True)
        assert live, f"no atoms for {user}"
        for record in live:
            assert record.source_message_ids and set(record.source_message_ids) <= l0_ids, record
        atoms[user] = {r.id for r in live}
        first = next(iter(live))
        drilled = api.get(f"/v1/users/{user}/atoms/{first.id}").json()
        assert {m["id"] for m in drilled["messages"]} == set(first.source_message_ids) & l0_ids

    # Re-sending the same turns adds no atom.
    post(api, turns)
    time.sleep(2)
    end_sessions(api, {(t.session, t.user) for t in turns})
    settled(files, users)
    for user in users:
        assert {r.id for r in RecordLog(files, TENANT, user).read(live_only=True)} == atoms[user]

    # L2/L3: the curators run after L1 (0.5 s delay in this stack).
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not all(PersonaStore(files, TENANT, u).read() for u in users):
        time.sleep(1)
    for user in users:
        scenes = SceneStore(files, TENANT, user).load()
        assert 1 <= len(scenes) <= 15
        body = PersonaStore(files, TENANT, user).read_body()
        assert 0 < visible_len(body) <= 2000  # what the prompt shows: the atom-id comments are stripped from it
        assert api.get(f"/v1/users/{user}/persona").status_code == 200
    out = api.post("/v1/recall", json={"user": users[0], "query": "What did you do last weekend?"}).json()
    assert out["prepend_context"] and "<user-persona>" in out["system_context"] and out["hits"]


FACTS = ["I love hiking in the mountains", "My favourite drink is green tea", "I work as a data engineer"]


def test_recall_never_returns_another_users_atom(stack: Stack, api: httpx.Client) -> None:
    from mnemoflow.events import TurnIn

    turns = []
    for k in range(USERS):
        user = f"fuzz-{k:02d}"
        said = [*FACTS, f"My name is Person{k} and my lucky number is {k * 7}"]
        turns += [
            TurnIn(message_id=f"{user}-m{i}", user=user, session=f"{user}-s", role="user", content=text)
            for i, text in enumerate(said)
        ]
    post(api, turns)
    time.sleep(2)
    end_sessions(api, {(t.session, t.user) for t in turns})
    settled(LocalFileStore(stack.settings.data_dir), sorted({t.user for t in turns}))

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(k=st.integers(0, USERS - 1), query=st.sampled_from([*FACTS, "name", "lucky number", "tea hiking"]))
    def check(k: int, query: str) -> None:
        user = f"fuzz-{k:02d}"
        hits = api.post("/v1/memory/search", json={"user": user, "query": query, "limit": 20}).json()
        assert hits, (user, query)
        assert all(m.startswith(f"{user}-m") for h in hits for m in h["source_message_ids"]), hits
        recall = api.post("/v1/recall", json={"user": user, "query": query}).json()
        assert all(m.startswith(f"{user}-m") for h in recall["hits"] for m in h["source_message_ids"])

    check()
