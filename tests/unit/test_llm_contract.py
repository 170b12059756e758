"""The LLM port contract (mnemoflow/ports/llm.py), one test body per case, run against every engine.

Engines: ``scripted`` (the public fake), ``openai-mock`` (OpenAIEngine over httpx.MockTransport, no sockets) and
``openai-uvicorn`` (OpenAIEngine against the same scripted server behind a real uvicorn socket, so connection
pooling, read timeouts and connect errors are real). Transport cases run only against the HTTP engines.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field

from mnemoflow.errors import ConfigError, InvalidInput, MnemoflowError, ServiceUnavailable, StructuredOutputError
from mnemoflow.llm import LLMUsage, OpenAIEngine
from mnemoflow.ports.llm import LLM, ChatMessage
from mnemoflow.testing import FakeOpenAIServer, FakeReply, FakeStall, FakeStatus, ScriptedLLM
from tests.services import asgi_server


class Fact(BaseModel):
    text: str = Field(min_length=1)
    priority: int = Field(ge=0, le=10)


class Facts(BaseModel):
    facts: list[Fact] = Field(max_length=5)


class Unbounded(BaseModel):
    items: list[str]


VALID = '{"facts": [{"text": "likes tea", "priority": 3}]}'
INVALID = '{"facts": [{"text": "likes tea", "priority": 99}]}'
NOT_JSON = "Sure! Here are the facts: likes tea"
PROMPT = [ChatMessage(role="system", content="Extract facts."), ChatMessage(role="user", content="I like tea.")]


@dataclass
class Harness:
    """An engine playing ``script`` plus a view of the requests it sent, as dicts in the OpenAI wire shape."""

    engine: LLM
    requests: Callable[[], list[dict[str, Any]]]

    def run(self, coro_fn: Callable[[LLM], Coroutine[Any, Any, Any]]) -> Any:
        async def main() -> Any:
            try:
                return await coro_fn(self.engine)
            finally:
                if isinstance(self.engine, OpenAIEngine):
                    await self.engine.aclose()

        return asyncio.run(main())


@pytest.fixture(scope="module")
def uvicorn_fake() -> Iterator[tuple[FakeOpenAIServer, str]]:
    """The scripted server behind uvicorn on a free loopback port, in a thread."""
    app = FakeOpenAIServer()
    with asgi_server(app) as url:
        yield app, url


def _scripted_requests(llm: ScriptedLLM) -> list[dict[str, Any]]:
    return [
        {
            "max_tokens": c.max_tokens,
            "temperature": c.temperature,
            "messages": [m.model_dump() for m in c.messages],
            "response_format": {"json_schema": {"schema": c.schema, "strict": True}},
        }
        for c in llm.calls
    ]


def _harness(kind: str, request: pytest.FixtureRequest) -> Callable[..., Harness]:
    def make(script: list[Any], **engine_kwargs: Any) -> Harness:
        usage = engine_kwargs.pop("usage", None)
        if kind == "scripted":
            llm = ScriptedLLM([s.text if isinstance(s, FakeReply) else s for s in script], usage=usage)
            return Harness(llm, lambda: _scripted_requests(llm))
        opts: dict[str, Any] = {"max_retries": 2, "backoff_s": 0.001, "timeout": 5.0, "usage": usage, **engine_kwargs}
        if kind == "openai-mock":
            server = FakeOpenAIServer(script)
            client = httpx.AsyncClient(transport=server.transport())
            return Harness(OpenAIEngine("http://fake", "m", client=client, **opts), lambda: server.requests)
        server, url = request.getfixturevalue("uvicorn_fake")
        server.reset(script)
        return Harness(OpenAIEngine(url, "m", api_key="k", **opts), lambda: server.requests)

    return make


@pytest.fixture(params=["scripted", "openai-mock", "openai-uvicorn"])
def make_engine(request: pytest.FixtureRequest) -> Callable[..., Harness]:
    return _harness(request.param, request)


@pytest.fixture(params=["openai-mock", "openai-uvicorn"])
def make_http_engine(request: pytest.FixtureRequest) -> Callable[..., Harness]:
    return _harness(request.param, request)


# -- output contract: every engine ---------------------------------------------------------------------------


def test_valid_output_is_parsed(make_engine: Callable[..., Harness]) -> None:
    h = make_engine([FakeReply(VALID)])
    out = h.run(lambda e: e.complete(PROMPT, Facts, max_tokens=64))
    assert out == Facts(facts=[Fact(text="likes tea", priority=3)])
    assert isinstance(h.engine, LLM)
    assert len(h.requests()) == 1


@pytest.mark.parametrize("bad", [INVALID, NOT_JSON])
def test_violation_is_retried_once_with_the_error(make_engine: Callable[..., Harness], bad: str) -> None:
    h = make_engine([FakeReply(bad), FakeReply(VALID)])
    out = h.run(lambda e: e.complete(PROMPT, Facts, max_tokens=64))
    assert out.facts[0].priority == 3
    first, second = h.requests()
    assert first["messages"] == [m.model_dump() for m in PROMPT]
    assert second["messages"][: len(PROMPT)] == first["messages"]
    echoed, complaint = second["messages"][len(PROMPT) :]
    assert echoed == {"role": "assistant", "content": bad}
    assert complaint["role"] == "user"
    assert ("facts.0.priority" in complaint["content"]) if bad == INVALID else ("JSON" in complaint["content"])


def test_two_violations_raise_with_the_raw_text(make_engine: Callable[..., Harness]) -> None:
    h = make_engine([FakeReply(NOT_JSON), FakeReply(INVALID)])
    with pytest.raises(StructuredOutputError) as info:
        h.run(lambda e: e.complete(PROMPT, Facts, max_tokens=64, stage="l1"))
    assert info.value.raw_text == INVALID
    assert info.value.stage == "l1"
    assert isinstance(info.value, MnemoflowError)
    assert len(h.requests()) == 2


def test_max_tokens_and_strict_bounded_schema_reach_the_model(make_engine: Callable[..., Harness]) -> None:
    h = make_engine([FakeReply(VALID)])
    h.run(lambda e: e.complete(PROMPT, Facts, max_tokens=77, temperature=0.3))
    (sent,) = h.requests()
    assert sent["max_tokens"] == 77
    assert sent["temperature"] == 0.3
    fmt = sent["response_format"]["json_schema"]
    assert fmt["strict"] is True
    assert fmt["schema"]["properties"]["facts"]["maxItems"] == 5
    assert fmt["schema"]["additionalProperties"] is False


def test_usage_is_recorded_per_stage(make_engine: Callable[..., Harness]) -> None:
    usage = LLMUsage()
    h = make_engine(
        [FakeReply(VALID), FakeReply(NOT_JSON), FakeReply(VALID), FakeReply(NOT_JSON), FakeReply(NOT_JSON)], usage=usage
    )

    async def calls(e: LLM) -> None:
        await e.complete(PROMPT, Facts, max_tokens=64, stage="l1")
        await e.complete(PROMPT, Facts, max_tokens=64, stage="l1")
        with pytest.raises(StructuredOutputError):
            await e.complete(PROMPT, Facts, max_tokens=64, stage="summary")

    h.run(calls)
    assert h.engine.usage is usage
    l1, summary = usage.stage("l1"), usage.stage("summary")
    assert (l1.calls, l1.ok, l1.failed, l1.retries) == (2, 2, 0, 1)
    assert (summary.calls, summary.ok, summary.failed, summary.retries) == (1, 0, 1, 1)
    assert summary.errors == {"StructuredOutputError": 1}
    assert l1.prompt_tokens > 0 and l1.completion_tokens > 0 and l1.latency_s >= 0
    assert usage.total().calls == 3
    assert [r.stage for r in usage.records()] == ["l1", "l1", "summary"]


def test_unbounded_list_model_is_refused_before_sending(make_engine: Callable[..., Harness]) -> None:
    h = make_engine([FakeReply('{"items": []}')])
    with pytest.raises(ConfigError, match="items"):
        h.run(lambda e: e.complete(PROMPT, Unbounded, max_tokens=64))
    assert h.requests() == []


# -- transport contract: HTTP engines ------------------------------------------------------------------------


def test_timeout_becomes_service_unavailable_after_retries(make_http_engine: Callable[..., Harness]) -> None:
    h = make_http_engine([FakeStall(2.0), FakeStall(2.0)], max_retries=1, timeout=0.2)
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable, match="timeout"):
        h.run(lambda e: e.complete(PROMPT, Facts, max_tokens=64, stage="l1"))
    assert len(h.requests()) == 2
    assert time.monotonic() - started < 1.5  # the read timeout, not the stall, ended each attempt
    assert h.engine.usage.stage("l1").errors == {"ServiceUnavailable": 1}


@pytest.mark.parametrize("first", [FakeStatus(500), FakeStatus(503), FakeStatus(429, retry_after=0.01)])
def test_server_error_then_success(make_http_engine: Callable[..., Harness], first: FakeStatus) -> None:
    h = make_http_engine([first, FakeReply(VALID)])
    out = h.run(lambda e: e.complete(PROMPT, Facts, max_tokens=64))
    assert out.facts[0].text == "likes tea"
    assert len(h.requests()) == 2
    assert h.engine.usage.stage("default").retries == 0  # transport retries are not validation retries


def test_persistent_5xx_becomes_service_unavailable(make_http_engine: Callable[..., Harness]) -> None:
    h = make_http_engine([FakeStatus(502)] * 3)
    with pytest.raises(ServiceUnavailable, match="3 attempt"):
        h.run(lambda e: e.complete(PROMPT, Facts, max_tokens=64))
    assert len(h.requests()) == 3


@pytest.mark.parametrize(
    ("status", "error"), [(400, InvalidInput), (422, InvalidInput), (401, ConfigError), (404, ConfigError)]
)
def test_4xx_is_not_retried(make_http_engine: Callable[..., Harness], status: int, error: type[Exception]) -> None:
    h = make_http_engine([FakeStatus(status, '{"error": "context too long"}'), FakeReply(VALID)])
    with pytest.raises(error, match=str(status)):
        h.run(lambda e: e.complete(PROMPT, Facts, max_tokens=64))
    assert len(h.requests()) == 1


def test_connect_error_becomes_service_unavailable() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    engine = OpenAIEngine(f"http://127.0.0.1:{port}/v1", "m", max_retries=2, backoff_s=0.001, timeout=2.0)
    with pytest.raises(ServiceUnavailable, match="ConnectError"):
        Harness(engine, list).run(lambda e: e.complete(PROMPT, Facts, max_tokens=64))


def test_backoff_grows_exponentially_and_honours_retry_after() -> None:
    delays: list[float] = []

    async def sleep(s: float) -> None:
        delays.append(s)

    server = FakeOpenAIServer([FakeStatus(503), FakeStatus(503), FakeStatus(429, retry_after=3.0), FakeReply(VALID)])
    engine = OpenAIEngine(
        "http://fake/v1",
        "m",
        max_retries=3,
        backoff_s=0.1,
        backoff_max_s=5.0,
        sleep=sleep,
        client=httpx.AsyncClient(transport=server.transport()),
    )
    Harness(engine, list).run(lambda e: e.complete(PROMPT, Facts, max_tokens=64))
    assert 0.05 <= delays[0] <= 0.1 and 0.1 <= delays[1] <= 0.2 and delays[2] == 3.0
    assert [r["model"] for r in server.requests] == ["m"] * 4


def test_concurrent_calls_share_a_small_pool(make_http_engine: Callable[..., Harness]) -> None:
    h = make_http_engine([FakeReply(VALID)] * 20, max_connections=2)

    async def many(e: LLM) -> list[Facts]:
        return await asyncio.gather(*(e.complete(PROMPT, Facts, max_tokens=64, stage="l1") for _ in range(20)))

    assert len(h.run(many)) == 20
    assert h.engine.usage.stage("l1").ok == 20
