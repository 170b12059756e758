"""The OpenAI-compatible proxy: ``POST /v1/chat/completions`` and ``GET /v1/models`` beside the memory API.

An agent changes its base URL to ``http://<mnemoflow>/v1`` and its API key to a mnemoflow key; each request is
captured, recalled for and compacted (:class:`mnemoflow.proxy.pipeline.MemoryProxy`) in this replica, with the
same Kafka producer, session shards and recaller as the other routes, then forwarded to the configured upstream.
The upstream's answer comes back unchanged (status, body, streamed chunks as they arrive), with ``x-mnemoflow-*``
headers saying what was captured, recalled and compacted, and a ``Server-Timing`` header with the time of each
stage the request went through (:data:`mnemoflow.proxy.pipeline.STAGES`), the upstream's and the proxy's total
included; every stage also goes to the ``mnemoflow_proxy_stage_seconds`` histogram. The answer's text is captured as
an assistant turn after it is delivered, so capture adds nothing to the answer's latency.

A key bound to an agent or a team is that agent on the proxy as on the API: its captures carry its agent and team,
it recalls what that agent may see, and ``X-Mnemoflow-Agent`` / ``X-Mnemoflow-Team`` naming another answer 404.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from mnemoflow.errors import InvalidInput, NotFound, ServiceUnavailable
from mnemoflow.events import ToolResultIn, TurnIn
from mnemoflow.memory.recall.recaller import RecallResult
from mnemoflow.offload.replies import CompactReply
from mnemoflow.proxy.answer import StreamedAnswer, answer_text
from mnemoflow.proxy.pipeline import AGENT_HEADER, TEAM_HEADER, MemoryProxy, Prepared, parse_chat, server_timing
from mnemoflow.scopes import Caller, Viewer
from mnemoflow.storage import LocalFileStore
from mnemoflow.tokens import load_tokenizer
from serving.deps import ApiDeps
from serving.publish import publish_tool_results, publish_turns

HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"})


class StackMemory:
    """The proxy's :class:`~mnemoflow.proxy.pipeline.MemorySide` over the API's own collaborators."""

    def __init__(self, deps: ApiDeps) -> None:
        self._deps = deps

    async def publish(self, tenant: str, turns: list[TurnIn], results: list[ToolResultIn]) -> None:
        now = datetime.now(UTC)
        partitions = self._deps.settings.shard_partitions
        await asyncio.gather(
            publish_turns(self._deps.bus, tenant, turns, now) if turns else asyncio.sleep(0),
            publish_tool_results(self._deps.bus, partitions, tenant, results, now) if results else asyncio.sleep(0),
        )

    async def recall(self, tenant: str, user: str, query: str, viewer: Viewer) -> RecallResult:
        """As the agent the request names in its headers, else the default agent: shared memory only."""
        result = await (await self._deps.recaller()).recall(tenant, user, query, viewer=viewer)
        self._deps.metrics.recalled(result)
        return result

    async def compact(self, tenant: str, session: str, messages: list[dict[str, Any]], window: int) -> CompactReply:
        if self._deps.compact is None:
            raise ServiceUnavailable("session actors are not connected to this API")
        return await self._deps.compact(tenant, session, messages, window)


def _passed_headers(response: httpx.Response, ours: dict[str, str]) -> dict[str, str]:
    """The upstream's headers less the hop-by-hop ones, then ours; an upstream's own ``Server-Timing`` follows
    ours in the one header."""
    kept = {k: v for k, v in response.headers.items() if k.lower() not in HOP_HEADERS}
    timing = kept.pop("server-timing", None)
    out = {**kept, **ours}
    if timing and "server-timing" in out:
        out["server-timing"] = f"{out['server-timing']}, {timing}"
    elif timing:
        out["server-timing"] = timing
    return out


def _openai_error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "api_error"
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}, "detail": message}
    return JSONResponse(body, status, headers)


def acting_headers(caller: Caller, headers: Mapping[str, str]) -> Mapping[str, str]:
    """The request's headers with a bound key's agent and team as the identity headers (what the headers left out
    filled in); 404 when they name another agent or team, as the API answers a body that does."""
    if caller.admin:
        return headers
    try:
        agent, team = caller.acting_as(headers.get(AGENT_HEADER), headers.get(TEAM_HEADER))
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    named = {AGENT_HEADER: agent, TEAM_HEADER: team}
    kept = {k.lower(): v for k, v in headers.items() if k.lower() not in named}
    return kept | {k: v for k, v in named.items() if v is not None}


def proxy_router(deps: ApiDeps, gate: Any) -> APIRouter:
    """``gate``: the API's :class:`serving.security.TenantGate`; the proxy acts as the key's holder."""
    settings = deps.settings
    router = APIRouter(tags=["OpenAI-compatible proxy"])
    Acting = Annotated[Caller, Depends(gate.caller)]
    if settings.proxy_upstream is not None:
        # each request counts its recall's tokens: the first one must not load the vocabulary; a replica with no
        # upstream never proxies and does not hold it (~80 MB)
        load_tokenizer()
    # captured ids and recall pins are caches: a loss costs a resend, or one break of the upstream's prefix cache
    files = LocalFileStore(settings.data_dir, fsync=False)
    proxy = MemoryProxy(StackMemory(deps), files, settings, observe=deps.metrics.proxy_stage)
    upstream = settings.proxy_upstream
    http = httpx.AsyncClient(timeout=httpx.Timeout(settings.proxy_upstream_timeout_seconds, connect=10))
    key = settings.proxy_upstream_api_key
    up_headers = {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}
    background: set[asyncio.Task[Any]] = set()

    def _upstream() -> str:
        if upstream is None:
            raise HTTPException(503, "the proxy has no upstream: set MNEMOFLOW_PROXY_UPSTREAM_URL")
        return upstream

    def _later(coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        background.add(task)
        task.add_done_callback(background.discard)

    @router.get("/v1/models")
    async def models(caller: Acting) -> Response:
        """The upstream's model list, unchanged."""
        try:
            response = await http.get(f"{_upstream()}/models", headers=up_headers)
        except httpx.HTTPError as exc:
            raise HTTPException(502, f"upstream {upstream} did not answer: {type(exc).__name__}") from exc
        return Response(response.content, response.status_code, _passed_headers(response, {}))

    @router.post("/v1/chat/completions")
    async def chat(request: Request, caller: Acting) -> Response:
        """An OpenAI chat completion through memory: capture, recall, compaction, then the upstream's answer.
        Errors of the proxy itself come in OpenAI's shape (``error.message``) so that agents' clients show them."""
        try:
            return await _chat(request, caller)
        except HTTPException as exc:
            return _openai_error(exc.status_code, str(exc.detail), exc.headers)
        except InvalidInput as exc:
            return _openai_error(400, str(exc))
        except ServiceUnavailable as exc:
            return _openai_error(503, str(exc))

    async def _chat(request: Request, caller: Caller) -> Response:
        started = time.perf_counter()
        tenant, headers = caller.tenant, acting_headers(caller, request.headers)
        try:
            raw = json.loads(await request.body())
        except ValueError as exc:
            raise InvalidInput(f"request body is not JSON: {exc}") from None
        body = parse_chat(raw)
        url = f"{_upstream()}/chat/completions"
        prepared = await proxy.prepare(tenant, body, headers)
        forward = {**raw, "messages": prepared.messages}
        try:
            if body.stream:
                return await _stream(tenant, url, forward, prepared, body.messages, started)
            asked = time.perf_counter()
            response = await http.post(url, json=forward, headers=up_headers)
            upstream_s = time.perf_counter() - asked
        except httpx.TimeoutException as exc:
            raise HTTPException(504, f"upstream {upstream} timed out", headers=prepared.headers) from exc
        except httpx.HTTPError as exc:
            raise HTTPException(502, f"upstream {upstream} failed: {type(exc).__name__}", prepared.headers) from exc
        if response.status_code == 200:
            _later(proxy.capture_answer(tenant, prepared, body.messages, answer_text(response.content)))
        ours = _timed(prepared, started, upstream_s)
        return Response(response.content, response.status_code, _passed_headers(response, ours))

    def _timed(prepared: Prepared, started: float, upstream_s: float) -> dict[str, str]:
        """``prepared``'s headers with ``Server-Timing``: the memory side's stages, the memory side, the upstream
        and the proxy's total since ``started`` (this replica's clock); the last two also go to the histogram."""
        upstream_ms, total_ms = upstream_s * 1000, (time.perf_counter() - started) * 1000
        deps.metrics.proxy_stage("upstream", upstream_ms)
        deps.metrics.proxy_stage("total", total_ms)
        stages = {**prepared.stages_ms, "memory": prepared.memory_ms, "upstream": upstream_ms, "total": total_ms}
        return {**prepared.headers, "server-timing": server_timing(stages)}

    async def _stream(
        tenant: str, url: str, forward: dict[str, Any], prepared: Prepared, sent: list[dict[str, Any]], started: float
    ) -> Response:
        asked = time.perf_counter()
        response = await http.send(http.build_request("POST", url, json=forward, headers=up_headers), stream=True)
        ours = _timed(prepared, started, time.perf_counter() - asked)
        if response.status_code != 200:
            content = await response.aread()
            await response.aclose()
            return Response(content, response.status_code, _passed_headers(response, ours))

        async def relay() -> AsyncIterator[bytes]:
            answer = StreamedAnswer()
            try:
                async for chunk in response.aiter_raw():
                    answer.feed(chunk)
                    yield chunk
            finally:
                await response.aclose()
            # only a whole answer is captured: a client that left mid-stream never got the rest
            _later(proxy.capture_answer(tenant, prepared, sent, answer.text))

        return StreamingResponse(relay(), 200, _passed_headers(response, ours))

    return router
