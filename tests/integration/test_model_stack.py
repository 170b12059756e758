"""The model path on the real stack (issue 28): the packaged Qwen2.5 0.5B, in the stack's ``llm`` Serve deployment
on llama.cpp, writes a user's scenes and persona and a session's task canvas. Turns and tool results go through
the API, Kafka (tansu) and Faust; L1 runs its heuristic (the 0.5B takes minutes per L1 call on the CPU); the user
curator (a Ray actor) asks the model for the scene plan and the persona; the session shard (a Ray actor) answers
each compaction with the heuristic canvas and has the model redraw it in the background.

What a user would check is checked: each file says which engine wrote it (a fallback would say ``heuristic``), is
valid (bounded persona, scene META, a canvas the official Mermaid parser accepts with every tool call on a node),
drills down to the layer below (persona → scene → atom → L0 message; node → offload entry → raw output, byte-exact),
and shows in the dashboard with its engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from mnemoflow.cli.stack import Stack
from mnemoflow.config import ModelStage, Settings
from mnemoflow.memory.links import visible_len
from mnemoflow.memory.persona.generate import MAX_PERSONA_CHARS, PersonaStore, navigation_scenes, strip_navigation
from mnemoflow.offload.canvas import from_mermaid, validate_mermaid
from mnemoflow.storage import LocalFileStore
from tests.integration.test_offload_stack import TRAJS, trajectory
from tests.services import TEST_MODEL, official_mermaid_check

pytestmark = pytest.mark.integration

TENANT, KEY, USER, CHAT, TASK = "acme", "key-acme", "dana", "chat-1", "task-1"
STAGES: frozenset[ModelStage] = frozenset({"scenes", "persona", "canvas"})
CALLS = 6  # tool calls of the trajectory: one canvas fold of the model (offload_canvas batches them)
MODEL_WORK = 1800  # s for all of the model's work: ~4 min on an idle machine, with one llama.cpp thread
T0 = datetime(2026, 11, 2, 21, 0, tzinfo=UTC)
SAID = [  # English and Chinese, as our users write
    (
        "user",
        "Hi! I'm Dana, a nurse at the children's hospital in Porto. I moved here from Lisbon in May and I work "
        "night shifts.",
    ),
    ("assistant", "Welcome to Porto, Dana! How are the night shifts going?"),
    ("user", "Tiring. Please always keep your answers short, I read them on my phone during breaks."),
    ("assistant", "Understood: short answers from now on."),
    ("user", "周末我在学做葡式蛋挞，目标是圣诞节前做出完美的酥皮。"),
    ("assistant", "听起来很棒！酥皮需要耐心。"),
    ("user", "I am also training for the Porto half marathon in November. I run three mornings a week after my shift."),
    ("assistant", "Great goal. Rest matters with night shifts."),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, test_model_gguf: Path) -> Iterator[Stack]:
    if not TRAJS.exists():
        pytest.skip(f"trajectories not found under {TRAJS}")
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("model-stack"),
        api_port=0,
        api_keys={TENANT: KEY},
        max_body_bytes=8 << 20,
        llm=TEST_MODEL,
        models_dir=test_model_gguf.parent,
        llm_stages=STAGES,
        llm_threads=1,  # the replica shares 2 cores with the stack and the tests
        l2_delay_after_l1_seconds=0.5,
        l2_min_interval_seconds=0,
        curator_tick_seconds=0.5,
        l1_tick_seconds=1,
    )
    st = Stack(settings)
    st.start()
    yield st
    st.stop()


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=stack.info.api_url, headers=headers, timeout=120) as client:
        yield client


def wait_for(what: str, check: Callable[[], Any], deadline: float, progress: Callable[[], object]) -> Any:
    """``check()``'s first truthy value before ``deadline`` (monotonic); else fail, saying what the stack had done."""
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(2)
    raise AssertionError(f"{what}: not by the deadline; {progress()}")


def llm_stages(api: httpx.Client) -> dict[str, Any]:
    """``/health``'s llm check detail per stage (calls, fallbacks…), for a failure message that says why."""
    checks = {c["name"]: c for c in api.get("/health").json()["checks"]}
    return {name: checks[name]["detail"] for name in ("llm", "extractor") if name in checks}


def send_conversation(api: httpx.Client) -> None:
    turns = [
        {
            "message_id": f"m{i}",
            "user": USER,
            "session": CHAT,
            "role": role,
            "content": text,
            "ts": (T0 + timedelta(minutes=i)).isoformat(),
        }
        for i, (role, text) in enumerate(SAID)
    ]
    assert api.post("/v1/turns", json={"turns": turns}).status_code == 202
    assert api.post(f"/v1/sessions/{CHAT}/end", json={"user": USER}).status_code == 202


def send_task(api: httpx.Client) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The first CALLS tool calls of an OpenHands run, then one compaction; returns the history and raw outputs."""
    messages = trajectory("django__django-11095")
    calls = {c["id"]: c["function"] for m in messages for c in m.get("tool_calls") or []}
    results = [m for m in messages if m["role"] == "tool"][:CALLS]
    end = messages.index(results[-1]) + 1
    body = {
        "results": [
            {
                "tool_call_id": m["tool_call_id"],
                "session": TASK,
                "tool_name": calls[m["tool_call_id"]]["name"],
                "arguments": calls[m["tool_call_id"]]["arguments"],
                "content": m["content"],
            }
            for m in results
        ]
    }
    assert api.post("/v1/tool-results", json=body).status_code == 202
    wait_for(
        "offload entries",
        lambda: len(api.get(f"/v1/sessions/{TASK}/offload").json()) >= CALLS,
        time.monotonic() + 120,
        str,
    )
    response = api.post(f"/v1/sessions/{TASK}/compact", json={"messages": messages[:end], "window": 32_000})
    assert response.status_code == 200, response.text[:500]
    return messages[:end], {m["tool_call_id"]: m["content"] for m in results}


@pytest.mark.timeout(MODEL_WORK + 600)
def test_the_model_writes_scenes_persona_and_a_canvas(stack: Stack, api: httpx.Client) -> None:
    deadline = time.monotonic() + MODEL_WORK
    files = LocalFileStore(stack.settings.data_dir)
    persona = PersonaStore(files, TENANT, USER)
    send_conversation(api)
    _, raw = send_task(api)

    # The canvas: the compaction answered with the heuristic's; the shard's background pass redraws it on the model.
    def refined() -> bool:
        state = api.get(f"/v1/sessions/{TASK}/state").json()
        return bool(state["canvas_seq"] >= 0 and state["model_canvas_seq"] >= state["canvas_seq"])

    wait_for("the model's pass over the canvas", refined, deadline, lambda: llm_stages(api))
    (name,) = api.get(f"/v1/sessions/{TASK}/canvases").json()
    canvas_text = api.get(f"/v1/sessions/{TASK}/canvases/{name}").text
    assert validate_mermaid(canvas_text) == []
    assert all(r["ok"] for r in official_mermaid_check([canvas_text]))
    canvas = from_mermaid(canvas_text)
    # Every call folded by the model; a fallback would say "heuristic" (and /health's details say why).
    assert canvas.drawn_by == ("llm",), (canvas_text, llm_stages(api))
    for call_id, content in raw.items():
        node = canvas.node_for_tool_call(call_id)
        assert node is not None, f"{call_id} is on no node"
        drilled = {d["entry"]["tool_call_id"]: d for d in api.get(f"/v1/sessions/{TASK}/nodes/{node.id}").json()}
        assert drilled[call_id]["raw"] == content  # node → offload entry → raw output, byte-exact

    # Scenes, then the persona: the curator runs after L1 (the heuristic's) on the model.
    listed = wait_for("scenes", lambda: api.get(f"/v1/users/{USER}/scenes").json(), deadline, lambda: llm_stages(api))
    scenes = [s for s in listed if s["engine"] == "llm"]
    assert scenes, (listed, llm_stages(api))
    wait_for("a persona", lambda: persona.read(), deadline, lambda: llm_stages(api))
    assert persona.written_by() == "llm", (persona.read(), llm_stages(api))
    body = strip_navigation(persona.read_body())
    assert 0 < visible_len(body) <= MAX_PERSONA_CHARS
    recalled = api.post("/v1/recall", json={"user": USER, "query": "What does Dana do for work?"}).json()
    assert persona.read_for_prompt() in recalled["system_context"]  # the engine line is a comment no prompt shows
    assert "engine:" not in recalled["system_context"]

    # Drill-down: persona → its scenes → their atoms → the L0 messages they came from.
    navigated = navigation_scenes(persona.read())
    assert {s["filename"] for s in scenes} <= set(navigated)
    said = {f"m{i}": text for i, (_, text) in enumerate(SAID)}
    for scene in scenes:
        text = api.get(f"/v1/users/{USER}/scenes/{scene['filename']}").text
        assert "engine: llm" in text.split("-----META-END-----")[0]
        assert scene["atom_ids"], scene
        for atom_id in scene["atom_ids"]:
            drilled = api.get(f"/v1/users/{USER}/atoms/{atom_id}").json()
            assert drilled["messages"] and all(m["content"] == said[m["id"]] for m in drilled["messages"])

    # The dashboard says who wrote what.
    with httpx.Client(base_url=stack.info.api_url, timeout=60) as browser:
        assert browser.post("/ui/login", data={"key": KEY, "next": "/ui"}).status_code == 303
        user_page = browser.get(f"/ui/users/{USER}").text
        assert 'id="persona-engine">written by llm<' in user_page
        assert all(s["filename"] in user_page for s in scenes) and "written by llm</span></summary>" in user_page
        session_page = browser.get(f"/ui/sessions/{TASK}").text
        assert "drawn by llm</small>" in session_page

    # The model's calls are counted per stage where an operator looks.
    stages = llm_stages(api)
    for stage in ("l2_scenes", "l3_persona", "offload_canvas"):
        assert stage in str(stages), stages
