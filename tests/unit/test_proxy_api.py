"""The proxy routes driven by the official ``openai`` client, with fakes behind the API and a stub upstream.

The real stack (Kafka, session shards, llama.cpp's server with SmolLM2) runs the same paths in
tests/integration/test_proxy_stack.py.
"""

import asyncio
import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from mnemoflow.config import TOPIC_TOOL_RESULTS, TOPIC_TURNS, Settings
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.events import TurnEvent
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.memory.persona.generate import PersonaStore
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.offload.replies import CompactReply
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ListBus, ManualClock
from serving.api import create_api
from tests.services import asgi_server
from tests.stub_upstream import stub_upstream

openai = pytest.importorskip("openai")
EMB = HashingEmbedder(64)
T0 = datetime(2026, 4, 2, 15, 30, tzinfo=UTC)


class Stack:
    def __init__(self, tmp_path: Path, compact_delay: float = 0.0, **settings: Any) -> None:
        files = LocalFileStore(tmp_path)
        said = ["I am a chemist and I drink oat milk every morning", "Please always answer in French"]
        L0Writer(files).write(
            [
                TurnEvent(tenant="acme", message_id=f"m{i}", user="ana", session="old", role="user", content=t, ts=T0)
                for i, t in enumerate(said)
            ]
        )
        store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
        asyncio.run(
            L1Pipeline(
                files=files,
                store=store,
                embedder=EMB,
                extractor=HeuristicExtractor(),
                judge=HeuristicJudge(),
                clock=ManualClock(T0),
            ).run("acme", "ana")
        )
        self.bus = ListBus()
        self.compactions: list[tuple[str, int, int]] = []
        self.upstream = stub_upstream(reply="Bonjour Ana.")
        self._files, self._store = files, store
        self._delay = compact_delay
        self._settings = {"data_dir": tmp_path, "api_keys": {"acme": "key-acme"}, **settings}

    @property
    def files(self) -> LocalFileStore:
        return self._files

    def learn(self, said: str) -> None:
        """A new user turn in L0 and an L1 pass over it: the atom index gets a new atom, as the extractor does."""
        L0Writer(self._files).write(
            [
                TurnEvent(
                    tenant="acme",
                    message_id=f"m-{len(said)}",
                    user="ana",
                    session="old",
                    role="user",
                    content=said,
                    ts=T0,
                )
            ]
        )
        asyncio.run(
            L1Pipeline(
                files=self._files,
                store=self._store,
                embedder=EMB,
                extractor=HeuristicExtractor(),
                judge=HeuristicJudge(),
                clock=ManualClock(T0),
            ).run("acme", "ana")
        )

    async def compact(self, tenant: str, session: str, messages: list[dict[str, Any]], window: int) -> CompactReply:
        await asyncio.sleep(self._delay)
        self.compactions.append((session, len(messages), window))
        kept = [messages[0], *messages[-2:]] if len(messages) > 3 else messages
        return CompactReply(
            messages=kept,
            removed=[],
            level="aggressive" if kept != messages else "none",
            tokens_before=100,
            tokens_after=40,
        )

    def turns(self) -> list[dict[str, Any]]:
        return [json.loads(v) for topic, records in self.bus.sent if topic == TOPIC_TURNS for _, v, _ in records]

    def answers(self, expected: int, timeout: float = 30) -> list[str]:
        """The captured assistant turns, once ``expected`` are there or ``timeout`` runs out: an answer is captured
        after it is sent, so the client can see it before the bus does."""
        deadline = time.monotonic() + timeout
        while True:
            found = [t["content"] for t in self.turns() if t["role"] == "assistant"]
            if len(found) >= expected or time.monotonic() > deadline:
                return found
            time.sleep(0.02)

    def run(self, key: str = "key-acme", **headers: str) -> Iterator[openai.OpenAI]:
        with asgi_server(self.upstream) as upstream:
            settings = Settings(**self._settings, proxy_upstream_url=upstream)
            app = create_api(
                settings,
                self.bus,
                compact=self.compact,
                recaller_factory=lambda: Recaller(store=self._store, embedder=EMB, files=self._files),
            )
            with asgi_server(app) as url:
                headers = {"X-Mnemoflow-User": "ana", "X-Mnemoflow-Session": "s1", **headers}
                yield openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, default_headers=headers)


@pytest.fixture
def stack(tmp_path: Path) -> Stack:
    return Stack(tmp_path, proxy_windows={"stub": 8192}, proxy_completion_reserve=1000)


CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}
CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Read a.txt"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "hello from a.txt"},
    {"role": "user", "content": "What milk do I drink?"},
]


def test_capture_recall_compaction_and_an_unchanged_answer(stack: Stack) -> None:
    for client in stack.run():
        raw = client.chat.completions.with_raw_response.create(model="stub", messages=CONVERSATION)
        completion = raw.parse()
        assert completion.choices[0].message.content == "Bonjour Ana."  # the upstream's answer, unchanged
        h = raw.headers
        assert (h["x-mnemoflow-memory"], h["x-mnemoflow-user"], h["x-mnemoflow-session"]) == ("ok", "ana", "s1")
        assert h["x-mnemoflow-captured"] == "turns=2; tool_results=1; too_large=0"
        assert h["x-mnemoflow-compaction"] == "aggressive" and int(h["x-mnemoflow-recalled"]) >= 1
        sent = stack.upstream.state.received[-1]["messages"]
        assert "oat milk" in sent[-1]["content"] and sent[-1]["content"].endswith("What milk do I drink?")
        assert "memory_search" in sent[0]["content"]  # the system context joined the system prompt
        [(session, n, window)] = stack.compactions
        assert (session, n) == ("s1", 5) and window < 8192 - 1000  # less the answer's reserve and the recall
        [result] = [json.loads(v) for t, rs in stack.bus.sent if t == TOPIC_TOOL_RESULTS for _, v, _ in rs]
        assert (result["tool_call_id"], result["tool_name"], result["content"]) == (
            "call_1",
            "read_file",
            "hello from a.txt",
        )

        again = client.chat.completions.with_raw_response.create(model="stub", messages=CONVERSATION)
        assert again.headers["x-mnemoflow-captured"] == "turns=0; tool_results=0; too_large=0"
        assert stack.upstream.state.received[-1]["messages"] == sent  # the same recall: a byte-identical prompt
        assert stack.answers(2) == ["Bonjour Ana.", "Bonjour Ana."]
        assert len({t["message_id"] for t in stack.turns() if t["role"] == "assistant"}) == 1  # one message in L0


def test_the_answer_says_each_stages_time_and_the_metrics_count_them(stack: Stack) -> None:
    """``Server-Timing`` names every stage the request went through, measured where it ran; the histogram gets
    them too, and the captures that run after the answer."""
    for client in stack.run():
        raw = client.chat.completions.with_raw_response.create(model="stub", messages=CONVERSATION)
        timing = dict(part.split(";dur=") for part in raw.headers["server-timing"].split(", "))
        stages = {name: float(ms) for name, ms in timing.items()}
        expected = {"capture_plan", "recall", "embed", "search", "context", "compact", "memory"}
        assert expected | {"upstream", "total"} == stages.keys()
        assert stages["total"] >= stages["memory"] + stages["upstream"] - 0.2  # rounding to 0.1 ms, twice
        assert stages["memory"] >= max(stages["recall"], stages["compact"]) - 0.1  # the two run at once
        base = str(client.base_url).removesuffix("/").removesuffix("v1")
        deadline, counted = time.monotonic() + 5, {}
        while time.monotonic() < deadline and not {"capture", "capture_answer"} <= counted.keys():
            text = httpx.get(f"{base}metrics").text
            found = re.findall(r'mnemoflow_proxy_stage_seconds_count\{stage="(\w+)"\} (\S+)', text)
            counted = {name: float(n) for name, n in found}
            time.sleep(0.02)
        assert counted == dict.fromkeys([*stages, "capture", "capture_answer"], 1.0)


def test_a_key_bound_to_an_agent_is_that_agent_on_the_proxy(tmp_path: Path) -> None:
    """Its captures carry its agent and team; identity headers naming another agent answer 404, nothing captured."""
    bound = Stack(tmp_path, agent_keys={"acme": [{"key": "key-coder", "agent": "coder", "team": "eng"}]})
    for client in bound.run("key-coder"):
        client.chat.completions.create(model="stub", messages=CONVERSATION[-1:])
        assert {(t["agent"], t["team"]) for t in bound.turns()} == {("coder", "eng")}
    for client in bound.run("key-coder", **{"X-Mnemoflow-Agent": "support"}):
        with pytest.raises(openai.NotFoundError, match="no agent support for this key"):
            client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "hi"}])
    assert all(t["content"] != "hi" for t in bound.turns())


def test_a_write_during_a_turn_reaches_the_next_user_turn(stack: Stack) -> None:
    """The tool steps of one user turn send a byte-identical prompt even after a write to memory (the upstream's
    prefix cache keeps serving it); the next user message is recalled for afresh, with the new atom and persona.
    (That an earlier user message keeps its block: tests/unit/test_proxy_core.py; this stack's compaction keeps
    only the first and last messages.)"""
    for client in stack.run():
        client.chat.completions.create(model="stub", messages=CONVERSATION)
        first = stack.upstream.state.received[-1]["messages"]
        stack.learn("I switched to almond milk last week")
        PersonaStore(stack.files, "acme", "ana").write("Ana is a chemist who answers in French.", {})
        client.chat.completions.create(model="stub", messages=CONVERSATION)
        assert stack.upstream.state.received[-1]["messages"] == first  # the same turn: the same prompt
        later = [*CONVERSATION, {"role": "assistant", "content": "Oat milk."}, {"role": "user", "content": "Milk?"}]
        client.chat.completions.create(model="stub", messages=later)
        after = stack.upstream.state.received[-1]["messages"]
        assert "almond milk" in after[-1]["content"] and "almond milk" not in first[-1]["content"]
        assert "Ana is a chemist" in after[0]["content"] and "Ana is a chemist" not in first[0]["content"]


def test_streaming_passes_chunks_through_and_captures_the_answer(stack: Stack) -> None:
    for client in stack.run():
        stream = client.chat.completions.create(model="stub", messages=CONVERSATION, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert text == "Bonjour Ana."
        assert stack.upstream.state.received[-1]["stream"] is True
        assert stack.answers(1) == ["Bonjour Ana."]


def test_models_and_tool_calls_pass_through(stack: Stack) -> None:
    for client in stack.run():
        assert [m.id for m in client.models.list()] == ["stub"]
        tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
        client.chat.completions.create(model="stub", messages=CONVERSATION[:2], tools=tools, temperature=0.1)
        received = stack.upstream.state.received[-1]
        assert received["tools"] == tools and received["temperature"] == 0.1


def test_fail_open_forwards_untouched_when_memory_is_slow(tmp_path: Path) -> None:
    stack = Stack(tmp_path, compact_delay=2.0, proxy_windows={"stub": 8192}, proxy_memory_timeout_seconds=0.3)
    for client in stack.run():
        raw = client.chat.completions.with_raw_response.create(model="stub", messages=CONVERSATION)
        assert raw.parse().choices[0].message.content == "Bonjour Ana."
        assert raw.headers["x-mnemoflow-memory"] == "bypassed; timeout after 300 ms"
        assert stack.upstream.state.received[-1]["messages"] == CONVERSATION


def test_fail_closed_and_bad_requests(tmp_path: Path) -> None:
    stack = Stack(
        tmp_path,
        compact_delay=2.0,
        proxy_windows={"stub": 8192},
        proxy_memory_timeout_seconds=0.3,
        proxy_fail_open=False,
    )
    for client in stack.run():
        with pytest.raises(openai.InternalServerError) as err:  # 503
            client.chat.completions.create(model="stub", messages=CONVERSATION)
        assert "fails closed" in err.value.message
        with pytest.raises(openai.BadRequestError, match="messages"):
            client.chat.completions.create(model="stub", messages=[])
        with pytest.raises(openai.AuthenticationError):
            client.with_options(api_key="wrong").models.list()
        assert stack.upstream.state.received == []
