"""A scripted OpenAI-compatible chat server for tests: in-process (``httpx.MockTransport``) or as an ASGI app.

Why both: the mock transport keeps unit tests fast, the ASGI app behind a real uvicorn socket exercises real
connections and timeouts; both play the same script, so one contract test body covers both. Public through
:mod:`mnemoflow.testing`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True, slots=True)
class FakeReply:
    """Answer 200 with ``text`` as the assistant message."""

    text: str
    prompt_tokens: int = 10
    completion_tokens: int | None = None
    """Defaults to the number of whitespace-separated words in ``text``."""
    finish_reason: str = "stop"


@dataclass(frozen=True, slots=True)
class FakeStatus:
    """Answer with an HTTP error status."""

    code: int
    body: str = '{"error": {"message": "scripted failure"}}'
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class FakeStall:
    """Do not answer for ``seconds`` (the mock transport raises ``httpx.ReadTimeout`` at once instead)."""

    seconds: float = 5.0


Behaviour = FakeReply | FakeStatus | FakeStall
Step = Behaviour | Callable[[dict[str, Any]], Behaviour]
"""A behaviour, or a function of the request body that returns one (to echo what was asked)."""


class FakeOpenAIServer:
    """Plays ``script`` one step per ``/chat/completions`` request and records every request body.

    When the script runs out it answers 400 ``script exhausted``, which the engine does not retry, so a test
    that sends more requests than it scripted fails loudly.
    """

    def __init__(self, script: Iterable[Step] = ()) -> None:
        self._lock = threading.Lock()
        self._script: deque[Step] = deque(script)
        self.requests: list[dict[str, Any]] = []

    def push(self, *steps: Step) -> None:
        with self._lock:
            self._script.extend(steps)

    def reset(self, script: Iterable[Step] = ()) -> None:
        with self._lock:
            self._script = deque(script)
            self.requests.clear()

    def _next(self, body: dict[str, Any]) -> Behaviour:
        with self._lock:
            self.requests.append(body)
            step: Step = self._script.popleft() if self._script else FakeStatus(400, '{"error": "script exhausted"}')
        return step(body) if callable(step) else step

    @staticmethod
    def _completion(reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        completion = reply.completion_tokens if reply.completion_tokens is not None else len(reply.text.split())
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": reply.prompt_tokens + completion,
            },
        }

    def _respond(self, behaviour: Behaviour, body: dict[str, Any]) -> tuple[int, bytes, dict[str, str]]:
        if isinstance(behaviour, FakeStatus):
            headers = {} if behaviour.retry_after is None else {"retry-after": str(behaviour.retry_after)}
            return behaviour.code, behaviour.body.encode(), headers
        assert isinstance(behaviour, FakeReply)
        return 200, json.dumps(self._completion(behaviour, body)).encode(), {}

    # -- in-process ------------------------------------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        """An httpx transport that answers from the script without sockets."""

        def handle(request: httpx.Request) -> httpx.Response:
            if not request.url.path.endswith("/chat/completions"):
                return httpx.Response(404, text="not found")
            body = json.loads(request.content)
            behaviour = self._next(body)
            if isinstance(behaviour, FakeStall):
                raise httpx.ReadTimeout("scripted stall", request=request)
            status, content, headers = self._respond(behaviour, body)
            return httpx.Response(status, content=content, headers={"content-type": "application/json", **headers})

        return httpx.MockTransport(handle)

    # -- ASGI ------------------------------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The ASGI app (run it with uvicorn, ``lifespan="off"``)."""
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers: dict[str, str] = {}
        if scope["method"] != "POST" or not scope["path"].endswith("/chat/completions"):
            status, content = 404, b"not found"
        else:
            body = json.loads(b"".join(chunks))
            behaviour = self._next(body)
            if isinstance(behaviour, FakeStall):
                await asyncio.sleep(behaviour.seconds)
                behaviour = FakeStatus(504, '{"error": "stalled"}')
            status, content, headers = self._respond(behaviour, body)
        raw_headers = [(b"content-type", b"application/json"), *((k.encode(), v.encode()) for k, v in headers.items())]
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": content})
