"""Short-term memory on the real stack: replay agent trajectories call by call through the API (tool results
via Kafka, compaction in the session shard), restart the shard mid-replay, and check what continues."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mnemoflow.cli.stack import Stack
from mnemoflow.config import Settings
from mnemoflow.offload.canvas import validate_mermaid
from mnemoflow.offload.messages import validate
from mnemoflow.tokens import messages_tokens
from tests.services import official_mermaid_check

pytestmark = pytest.mark.integration

TENANT, KEY = "acme", "key-acme"
EVAL = Path(__file__).resolve().parents[3] / "shared" / "eval"
TRAJS = EVAL / "trajectories" / "openhands_swebench_verified" / "trajs"
WINDOW = 24_000


def trajectory(name: str, id_prefix: str = "") -> list[dict[str, Any]]:
    """One recorded run; ``id_prefix`` keeps tool-call ids unique when runs are chained into one session."""
    import sys

    sys.path.insert(0, str(EVAL))
    from loaders import load_trajectories  # the eval set's own loader, not a copy of its data

    messages = load_trajectories(str(TRAJS / name))[0]
    if not id_prefix:
        return messages
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": id_prefix + c["id"]} for c in m["tool_calls"]]
        if m["role"] == "tool":
            m["tool_call_id"] = id_prefix + m["tool_call_id"]
        out.append(m)
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not TRAJS.exists():
        pytest.skip(f"trajectories not found under {TRAJS}")
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("offload"),
        api_port=0,
        api_keys={TENANT: KEY},
        l1_enabled=False,
        max_body_bytes=8 << 20,
    )
    st = Stack(settings)
    st.start()
    yield st
    st.stop()


def wait_entries(api: httpx.Client, session: str, n: int, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    entries = api.get(f"/v1/sessions/{session}/offload").json()
    while len(entries) < n and time.monotonic() < deadline:
        time.sleep(0.1)
        entries = api.get(f"/v1/sessions/{session}/offload").json()
    assert len(entries) >= n, f"{len(entries)} of {n} entries landed"
    return entries


def test_replay_with_compaction_and_a_shard_restart(stack: Stack) -> None:
    import ray

    from actors import ShardClient

    session = "swe-chain"
    messages = trajectory("django__django-11095", "a-") + trajectory("astropy__astropy-12907", "b-")[1:]
    calls = {c["id"]: c["function"] for m in messages for c in m.get("tool_calls") or []}
    raw = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    client = ShardClient(stack.settings)
    headers = {"Authorization": f"Bearer {KEY}"}
    steps = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    restart_at = steps[len(steps) // 2]
    removed: dict[str, dict] = {}
    boundaries_before_restart = canvases_before_restart = None
    with httpx.Client(base_url=stack.info.api_url, headers=headers, timeout=120) as api:
        submitted = 0
        for i in steps:
            prefix = messages[:i]
            results = [m for m in prefix if m["role"] == "tool"][submitted:]
            if results:
                body = {
                    "results": [
                        {
                            "tool_call_id": m["tool_call_id"],
                            "session": session,
                            "tool_name": calls[m["tool_call_id"]]["name"],
                            "arguments": calls[m["tool_call_id"]]["arguments"],
                            "content": m["content"],
                        }
                        for m in results
                    ]
                }
                assert api.post("/v1/tool-results", json=body).status_code == 202
                submitted += len(results)
                wait_entries(api, session, submitted)
            if i == restart_at:
                state = api.get(f"/v1/sessions/{session}/state").json()
                boundaries_before_restart = state["boundaries"]
                canvases_before_restart = api.get(f"/v1/sessions/{session}/canvases").json()
                ray.kill(client.handle(client.index_for(TENANT, session)), no_restart=False)
            response = api.post(f"/v1/sessions/{session}/compact", json={"messages": prefix, "window": WINDOW})
            assert response.status_code == 200, response.text[:500]
            out = response.json()
            validate(out["messages"])  # a valid chat array: no orphaned tool call or result
            assert messages_tokens(out["messages"]) <= WINDOW
            last_user = max(j for j, m in enumerate(prefix) if m["role"] == "user")
            assert any(m == prefix[last_user] for m in out["messages"])  # the last user message is kept
            removed.update({r["tool_call_id"]: r for r in out["removed"]})

        state = api.get(f"/v1/sessions/{session}/state").json()
        canvases = api.get(f"/v1/sessions/{session}/canvases").json()
        assert boundaries_before_restart is not None and canvases_before_restart is not None
        assert state["boundaries"][: len(boundaries_before_restart)] == boundaries_before_restart
        assert canvases[: len(canvases_before_restart)] == canvases_before_restart  # no canvas lost or renumbered
        assert len(set(canvases)) == len(canvases) and canvases
        texts = [api.get(f"/v1/sessions/{session}/canvases/{name}").text for name in canvases]
        assert all(validate_mermaid(text) == [] for text in texts)
        official = official_mermaid_check(texts)  # the canvases the pipeline made, through the real parser
        assert all(r["ok"] for r in official), [r for r in official if not r["ok"]][:2]

        assert removed, "a 24k window over two chained tasks must reclaim something"
        for call_id, item in removed.items():
            assert api.get(f"/v1/sessions/{session}/refs/{call_id}").content == raw[call_id].encode()
            if item["node_id"]:
                drilled = api.get(f"/v1/sessions/{session}/nodes/{item['node_id']}").json()
                by_call = {d["entry"]["tool_call_id"]: d for d in drilled}
                assert by_call[call_id]["raw"] == raw[call_id]
