"""The proxy end to end: an OpenHands trajectory replayed as an agent loop with the official ``openai`` client,
through mnemoflow (real Apache Kafka, Faust worker, session shards, Serve API) to llama.cpp's server with SmolLM2.

The recorded tool calls and outputs play the environment; the upstream answers each step. Checked: no prompt the
upstream receives exceeds its context window (by the upstream's own count), prompt tokens saved against sending the
raw array, every tool output recoverable byte-exact through drill-down (the SDK, and the MCP server over stdio),
and L0 and L1 holding the conversation afterwards. The agent loop goes through the stack's door, the API replica's
own listener (``api_door`` direct, the default); the streamed request at its end through Serve's HTTP proxy, the
same app one hop further.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mnemoflow.cli.stack import Stack
from mnemoflow.client import Client, NotFound
from mnemoflow.config import Settings
from mnemoflow.proxy.capture import text_of
from mnemoflow.tokens import messages_tokens
from tests.integration.test_offload_stack import TRAJS, trajectory
from tests.services import ensure_smollm2_gguf, llama_cpp_server

pytestmark = pytest.mark.integration
openai = pytest.importorskip("openai")

TENANT, KEY, USER, SESSION = "acme", "key-acme", "dev", "swe-8707"
TRAJ = "astropy__astropy-8707"
N_CTX, MAX_TOKENS = 2048, 8
RATIO = 1.4
"""SmolLM2 tokens per o200k token: 1.23 over these trajectories' long messages, 1.38 at worst for one (measured
with llama.cpp's tokenizer); the proxy budgets with the worst, so the upstream's own count stays in the window."""


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("llama_cpp", reason="needs the llama extra: pip install 'mnemoflow[llama]'")
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with llama_cpp_server(ensure_smollm2_gguf(), log, n_ctx=N_CTX) as url:
        yield url


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, upstream: str) -> Iterator[Stack]:
    if not TRAJS.exists():
        pytest.skip(f"trajectories not found under {TRAJS}")
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("proxy"),
        api_port=0,
        api_keys={TENANT: KEY},
        max_body_bytes=8 << 20,
        proxy_upstream_url=upstream,
        proxy_windows={"smollm2": N_CTX},
        proxy_tokens_per_o200k=RATIO,
        proxy_memory_timeout_seconds=60,  # the first recall loads the embedder: no bypass in this test
    )
    st = Stack(settings)
    st.start()
    yield st
    st.stop()


def wait_for(what: str, check: object, timeout: float = 90) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()  # type: ignore[operator]
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen within {timeout:.0f}s")


@pytest.mark.timeout(2400)  # 24 upstream calls on 2 shared cores: ~2 min idle, far more when the machine is busy
def test_trajectory_replay_through_the_proxy(stack: Stack) -> None:
    messages = trajectory(TRAJ)
    raw = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    agent = openai.OpenAI(
        base_url=f"{stack.info.api_url}/v1",
        api_key=KEY,
        max_retries=0,
        timeout=600,
        default_headers={"X-Mnemoflow-User": USER, "X-Mnemoflow-Session": SESSION},
    )
    steps = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    raw_tokens = forwarded_tokens = 0
    upstream_prompts: list[int] = []
    levels: set[str] = set()
    for i in steps:
        prefix = messages[:i]
        response = agent.chat.completions.with_raw_response.create(
            model="smollm2", messages=prefix, max_tokens=MAX_TOKENS, temperature=0
        )
        completion = response.parse()
        h = response.headers
        assert h["x-mnemoflow-memory"] == "ok", h["x-mnemoflow-memory"]
        assert completion.choices[0].message is not None and completion.usage is not None
        upstream_prompts.append(completion.usage.prompt_tokens)
        raw_tokens += messages_tokens(prefix)
        forwarded_tokens += int(h["x-mnemoflow-tokens"].split("after=")[1])
        levels.add(h["x-mnemoflow-compaction"])

    proxy = stack.info.serve_url
    assert proxy is not None and proxy != stack.info.api_url
    assert httpx.get(f"{proxy}/health/live", timeout=10).status_code == 200
    assert httpx.get(f"{proxy}/v1/models", timeout=10).status_code == 401  # the same keys guard both doors
    stream = agent.with_options(base_url=f"{proxy}/v1").chat.completions.create(
        model="smollm2", messages=messages[: steps[-1]], max_tokens=MAX_TOKENS, temperature=0, stream=True
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    saved = 1 - forwarded_tokens / raw_tokens
    print(
        f"\n{len(steps)} requests; o200k prompt tokens raw {raw_tokens:,}, forwarded {forwarded_tokens:,} "
        f"({saved:.1%} saved); upstream's largest prompt {max(upstream_prompts)} of {N_CTX}; {levels}"
    )
    assert max(upstream_prompts) + MAX_TOKENS <= N_CTX  # by the upstream's own tokenizer
    assert raw_tokens > 5 * N_CTX and saved > 0.5
    assert levels - {"none"}, "a 2k window over a 31k-token run must reclaim"
    assert isinstance(streamed, str)

    with Client(stack.info.api_url, KEY) as api:
        wait_for("every tool output in refs", lambda: len(list(api.offload(SESSION))) >= len(raw))
        for call_id, content in raw.items():
            assert api.ref(SESSION, call_id) == content.encode()  # byte-exact
        nodes = {e.node_id for e in api.offload(SESSION) if e.node_id}
        for node in nodes:
            for drilled in api.node(SESSION, node):
                assert drilled.raw == raw[drilled.entry.tool_call_id]
        sent = messages[: steps[-1]]  # the last answer of the recording is never sent: it is what the model says
        said = {text_of(m.get("content")).strip() for m in sent if m["role"] in ("user", "assistant")} - {""}
        # captures are published beside the requests: wait until the stream worker wrote the last of them
        wait_for(
            "every user and assistant text of the run in L0",
            lambda: said <= {m.content for m in api.conversations(USER)},
        )
        l0 = list(api.conversations(USER))
        api.end_session(SESSION, USER)

        def atoms() -> list:
            try:
                return api.memory_search(USER, "astropy bug", limit=5)
            except NotFound:
                return []

        hits = wait_for("L1 atoms from the run", atoms)
        assert {s for h in hits for s in h.source_message_ids} <= {m.id for m in l0}
        assert (Path(stack.settings.data_dir) / TENANT / "sessions" / SESSION / "proxy-capture.json").is_file()
    assert_mcp_drill_down(stack, raw)


def assert_mcp_drill_down(stack: Stack, raw: dict[str, str]) -> None:
    from mcp import Client as McpClient
    from mcp.client.stdio import StdioServerParameters

    args = ["-m", "mnemoflow.cli", "mcp", "--api", stack.info.api_url, "--key", KEY]
    params = StdioServerParameters(command=sys.executable, args=args)

    async def run() -> list[str]:
        async with McpClient(params) as client:
            out = []
            for call_id in list(raw)[:5]:
                got = await client.call_tool("drill_down", {"session": SESSION, "tool_call_id": call_id})
                out.append(got.structured_content["raw"])
            return out

    assert asyncio.run(run()) == [raw[c] for c in list(raw)[:5]]
