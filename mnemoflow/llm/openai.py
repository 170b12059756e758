"""OpenAI-compatible engine: any ``/v1/chat/completions`` server (vLLM, Ollama, llama.cpp server, OpenAI).

Why one engine for all of them: they share the wire format, and JSON-schema ``response_format`` is how each
constrains decoding (vLLM and llama.cpp turn it into guided decoding / a grammar). Transport concerns live here
— pooled connections, timeouts, backoff on 429/5xx/connect errors, translation of httpx errors to mnemoflow
errors at this boundary; output validation and its retry live in :mod:`mnemoflow.llm.structured`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Literal

import httpx

from mnemoflow.errors import ConfigError, InvalidInput, ServiceUnavailable
from mnemoflow.llm.structured import RawReply, StructuredEngine, StructuredRequest
from mnemoflow.llm.usage import LLMUsage

logger = logging.getLogger(__name__)

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_CONFIG_STATUS = frozenset({401, 403, 404})


class _Retryable(Exception):
    """Internal: this attempt failed in a way another attempt may fix."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class OpenAIEngine(StructuredEngine):
    """The LLM port over an OpenAI-compatible HTTP server.

    ``base_url`` is the server root (``http://host:8000``) or its ``/v1`` root. ``timeout`` bounds each HTTP
    attempt (connect, read, write, pool); ``max_retries`` is the number of extra attempts after a 429/5xx,
    timeout or connection error, spaced by exponential backoff with jitter (``backoff_s * 2**n``, capped at
    ``backoff_max_s``, honouring a numeric ``Retry-After``). Pass ``client`` to share a pool; otherwise the
    engine owns one and closes it in :meth:`aclose`. Building the engine does no I/O.

    ``schema_format`` says how the server takes a JSON schema: ``json_schema`` (OpenAI, vLLM, Ollama) or
    ``json_object`` (llama.cpp's ``llama_cpp.server``: ``{"type": "json_object", "schema": ...}``, a grammar).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 2,
        client: httpx.AsyncClient | None = None,
        usage: LLMUsage | None = None,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        max_connections: int = 32,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        schema_format: Literal["json_schema", "json_object"] = "json_schema",
    ) -> None:
        if max_retries < 0 or timeout <= 0:
            raise ConfigError("OpenAIEngine: max_retries must be >= 0 and timeout > 0")
        root = base_url.rstrip("/")
        self._url = (root if root.endswith("/v1") else root + "/v1") + "/chat/completions"
        self.model = model
        self._schema_format = schema_format
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(timeout)
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self._sleep = sleep
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(
            timeout=self._timeout,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )
        self.usage = usage if usage is not None else LLMUsage()

    async def ping(self, timeout: float = 1.0) -> str:
        """Readiness: the server answers ``GET /v1/models``. Any answer but 401/403 or a 5xx counts: some servers
        (and the test fakes) serve chat completions without listing models; a refused key is not ready."""
        url = self._url.removesuffix("/chat/completions") + "/models"
        try:
            response = await self._client.get(url, headers=self._headers, timeout=timeout)
        except httpx.HTTPError as exc:
            raise ServiceUnavailable(f"LLM server {url} unreachable: {type(exc).__name__} {exc}") from exc
        if response.status_code in (401, 403) or response.status_code >= 500:
            raise ServiceUnavailable(f"LLM server {url} answered {response.status_code}")
        return f"{url} answered {response.status_code}"

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> OpenAIEngine:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    def _body(self, request: StructuredRequest) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [m.model_dump() for m in request.messages],
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "response_format": (
                {
                    "type": "json_schema",
                    "json_schema": {"name": request.schema_name, "schema": request.schema, "strict": True},
                }
                if self._schema_format == "json_schema"
                else {"type": "json_object", "schema": request.schema}
            ),
        }

    async def _send(self, request: StructuredRequest) -> RawReply:
        body = self._body(request)
        last: _Retryable | None = None
        for attempt in range(self._max_retries + 1):
            if last is not None:
                delay = min(self._backoff_max_s, self._backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
                if last.retry_after is not None:
                    delay = max(delay, min(last.retry_after, self._backoff_max_s))
                logger.info(
                    "llm stage=%s retry %d/%d in %.2fs: %s", request.stage, attempt, self._max_retries, delay, last
                )
                await self._sleep(delay)
            try:
                return await self._post_once(body)
            except _Retryable as exc:
                last = exc
        raise ServiceUnavailable(
            f"LLM server {self._url} failed {self._max_retries + 1} attempt(s) (stage {request.stage!r}): {last}"
        ) from last

    async def _post_once(self, body: dict[str, Any]) -> RawReply:
        with _map_transport_errors(self._url):
            response = await self._client.post(self._url, json=body, headers=self._headers, timeout=self._timeout)
            await response.aread()
        status = response.status_code
        if status in _RETRY_STATUS or status >= 500:
            raise _Retryable(f"HTTP {status}: {response.text[:200]}", _retry_after(response))
        if status in _CONFIG_STATUS:
            raise ConfigError(
                f"LLM server {self._url} answered {status} (check URL, model name and API key): {response.text[:300]}"
            )
        if status >= 400:
            raise InvalidInput(f"LLM server {self._url} refused the request ({status}): {response.text[:500]}")
        return _parse(response)


def _parse(response: httpx.Response) -> RawReply:
    """Pull the text and token counts out of a chat completion; a malformed body is a server fault."""
    try:
        data = response.json()
        choice = data["choices"][0]
        message = choice["message"]
        usage = data.get("usage") or {}
        text = message.get("content") or message.get("refusal") or ""
        return RawReply(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            finish_reason=choice.get("finish_reason"),
        )
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ServiceUnavailable(f"LLM server returned a malformed chat completion: {response.text[:300]}") from exc


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


@contextmanager
def _map_transport_errors(url: str) -> Iterator[None]:
    """httpx transport errors are retryable; anything else httpx raises is a bug here, made a ServiceUnavailable."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise _Retryable(f"timeout ({type(exc).__name__}) talking to {url}") from exc
    except httpx.TransportError as exc:
        raise _Retryable(f"{type(exc).__name__} talking to {url}: {exc}") from exc
    except httpx.HTTPError as exc:
        raise ServiceUnavailable(f"HTTP error talking to {url}: {exc}") from exc
