"""Strict schemas, usage accounting, the public fakes and OpenAIEngine wire details."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from mnemoflow.errors import ConfigError, InvalidInput, ServiceUnavailable, StructuredOutputError
from mnemoflow.llm import CallRecord, LLMUsage, OpenAIEngine, strict_json_schema
from mnemoflow.ports.clock import Clock
from mnemoflow.ports.llm import ChatMessage
from mnemoflow.testing import FakeOpenAIServer, FakeReply, ManualClock, ScriptedCall, ScriptedLLM

PROMPT = [ChatMessage(role="user", content="hi")]


class Item(BaseModel):
    title: str = "untitled"  # a property named like a schema keyword must survive
    tags: list[str] = Field(default_factory=list, max_length=3)


class Doc(BaseModel):
    items: list[Item] = Field(max_length=4)
    pair: tuple[int, int]
    note: str | None = None


def _walk(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [n for x in node for n in _walk(x)]
    if not isinstance(node, dict):
        return []
    return [node, *(n for v in node.values() for n in _walk(v))]


def test_strict_schema_closes_every_object_and_bounds_every_list() -> None:
    schema = strict_json_schema(Doc)
    objects = [n for n in _walk(schema) if n.get("type") == "object"]
    assert len(objects) == 2
    for obj in objects:
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
        assert all("default" not in p for p in obj["properties"].values())
    assert "title" in schema["$defs"]["Item"]["properties"]
    assert all("maxItems" in n for n in _walk(schema) if n.get("type") == "array")
    schema["mutated"] = True
    assert "mutated" not in strict_json_schema(Doc)


class Nested(BaseModel):
    inner: list[list[int]] = Field(max_length=2)


class Mapping(BaseModel):
    scores: dict[str, int]


@pytest.mark.parametrize(("model", "match"), [(Nested, r"\$\.inner\.items"), (Mapping, "map")])
def test_unbounded_shapes_are_refused(model: type[BaseModel], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        strict_json_schema(model)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]), st.integers(0, 500), st.integers(0, 500), st.integers(1, 2), st.booleans()
        ),
        max_size=30,
    )
)
def test_stage_totals_are_the_sum_of_records(rows: list[tuple[str, int, int, int, bool]]) -> None:
    usage = LLMUsage(keep=5)
    for stage, p, c, attempts, ok in rows:
        usage.record(CallRecord(stage, p, c, 0.01, attempts, ok, None if ok else "ServiceUnavailable"))
    total = usage.total()
    assert total.calls == len(rows) == sum(s.calls for s in usage.stages().values())
    assert total.prompt_tokens == sum(r[1] for r in rows)
    assert total.retries == sum(r[3] - 1 for r in rows)
    assert total.failed == sum(not r[4] for r in rows) == total.errors.get("ServiceUnavailable", 0)
    assert len(usage.records()) == min(5, len(rows))


class Answer(BaseModel):
    value: int


def test_scripted_llm_records_calls_and_accepts_models_callables_and_errors() -> None:
    clock = ManualClock()

    def echo(call: ScriptedCall) -> str:
        clock.advance(2)
        return json.dumps({"value": call.max_tokens})

    llm = ScriptedLLM([Answer(value=1), echo, ServiceUnavailable("down")], timer=clock.monotonic)

    async def main() -> None:
        assert (await llm.complete(PROMPT, Answer, max_tokens=5)).value == 1
        assert (await llm.complete(PROMPT, Answer, max_tokens=9, stage="s")).value == 9
        with pytest.raises(ServiceUnavailable):
            await llm.complete(PROMPT, Answer, max_tokens=5, stage="s")
        with pytest.raises(AssertionError, match="ran out"):
            await llm.complete(PROMPT, Answer, max_tokens=5)

    asyncio.run(main())
    assert [c.max_tokens for c in llm.calls] == [5, 9, 5, 5]
    assert llm.calls[1].stage == "s" and llm.calls[1].messages == PROMPT
    s = llm.usage.stage("s")
    assert (s.ok, s.failed, s.latency_s) == (1, 1, 2.0)


def test_invalid_arguments_are_refused() -> None:
    llm = ScriptedLLM(['{"value": 1}'])
    with pytest.raises(InvalidInput):
        asyncio.run(llm.complete(PROMPT, Answer, max_tokens=0))
    with pytest.raises(InvalidInput):
        asyncio.run(llm.complete([], Answer, max_tokens=5))
    assert llm.calls == []


def test_manual_clock_is_a_clock() -> None:
    clock = ManualClock(datetime(2030, 5, 1, tzinfo=UTC))
    as_port: Clock = clock  # type-checked conformance; Clock is not runtime_checkable
    assert as_port.now() == datetime(2030, 5, 1, tzinfo=UTC)
    assert clock.advance(90) == datetime(2030, 5, 1, 0, 1, 30, tzinfo=UTC)
    assert clock.advance(timedelta(hours=1)) == clock.now() == datetime(2030, 5, 1, 1, 1, 30, tzinfo=UTC)
    assert clock.monotonic() == 3690.0
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        ManualClock(datetime(2030, 1, 1))


def _engine(handler: Any, base: str = "http://srv:8000", **kw: Any) -> OpenAIEngine:
    return OpenAIEngine(base, "tiny", client=httpx.AsyncClient(transport=httpx.MockTransport(handler)), **kw)


@pytest.mark.parametrize("base", ["http://srv:8000", "http://srv:8000/", "http://srv:8000/v1", "http://srv:8000/v1/"])
def test_openai_engine_url_and_auth(base: str) -> None:
    server = FakeOpenAIServer([FakeReply('{"value": 3}')])
    seen: list[httpx.Request] = []
    inner = server.transport()

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return inner.handle_request(request)

    engine = _engine(handler, base, api_key="sk-test")
    assert asyncio.run(engine.complete(PROMPT, Answer, max_tokens=8)).value == 3
    assert str(seen[0].url) == "http://srv:8000/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sk-test"
    assert server.requests[0]["response_format"]["json_schema"]["name"] == "Answer"


def test_malformed_completion_is_service_unavailable_and_null_content_is_retried() -> None:
    bodies = iter([{"choices": []}])
    engine = _engine(lambda r: httpx.Response(200, json=next(bodies)))
    with pytest.raises(ServiceUnavailable, match="malformed"):
        asyncio.run(engine.complete(PROMPT, Answer, max_tokens=8))
    null = {"choices": [{"message": {"content": None}, "finish_reason": "length"}]}
    engine = _engine(lambda r: httpx.Response(200, json=null))
    with pytest.raises(StructuredOutputError) as info:
        asyncio.run(engine.complete(PROMPT, Answer, max_tokens=8))
    assert info.value.raw_text == ""


def test_engine_constructor_validates_and_does_no_io() -> None:
    with pytest.raises(ConfigError):
        OpenAIEngine("http://x", "m", max_retries=-1)
    engine = OpenAIEngine("http://127.0.0.1:9", "m")  # nothing listens; building must not connect
    asyncio.run(engine.aclose())


def test_structured_output_error_survives_pickling() -> None:
    import pickle

    from mnemoflow.errors import StructuredOutputError

    err = pickle.loads(pickle.dumps(StructuredOutputError("bad", raw_text="{", stage="l1")))
    assert (str(err), err.raw_text, err.stage) == ("bad", "{", "l1")


def test_usage_summary_per_stage_counts_fallbacks_apart_from_calls() -> None:
    usage = LLMUsage()
    usage.record(CallRecord("l1-extraction", 100, 20, 1.0, 2, ok=False, error="StructuredOutputError"))
    usage.record(CallRecord("l1-extraction", 50, 10, 0.5, 1, ok=True))
    usage.fallback("l1-extraction", StructuredOutputError("bad", raw_text="x"))
    usage.record(CallRecord("l3_persona", 0, 0, 2.0, 1, ok=True))
    assert usage.stage("l1-extraction").calls == 2 and usage.total().fallbacks == 1
    assert len(usage.records()) == 3  # the fallback is not a call
    assert usage.summary() == (
        "l1-extraction: 2 calls, 1 retries, 1 failed, 1 fallbacks, tokens 150 in / 30 out, 0.75 s mean; "
        "l3_persona: 1 calls, 2.00 s mean"
    )
