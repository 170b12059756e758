"""An OpenAI-compatible upstream that answers in fixed time: the proxy's tests and benchmark put it behind the
proxy so that only the proxy's own work is measured, and read back exactly what the upstream received."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from mnemoflow.tokens import messages_tokens


def stub_upstream(reply: str = "Noted.", delay_s: float = 0.0) -> FastAPI:
    """``app.state.received`` holds every chat request body, in order. A request with ``"stub_echo": true`` gets
    its messages back as the answer's ``stub_messages`` (what a benchmark in another process reads of what the
    upstream received)."""
    app = FastAPI()
    app.state.received = []

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "stub", "object": "model", "owned_by": "tests"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        app.state.received.append(body)
        if delay_s:
            await asyncio.sleep(delay_s)
        created, model = int(time.time()), body.get("model", "stub")
        usage = {"prompt_tokens": messages_tokens(body["messages"]), "completion_tokens": len(reply.split())}
        if not body.get("stream"):
            message = {"role": "assistant", "content": reply}
            answer = {
                "id": "cmpl-stub",
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {**usage, "total_tokens": sum(usage.values())},
            }
            if body.get("stub_echo"):
                answer["stub_messages"] = body["messages"]
            return JSONResponse(answer)

        async def events() -> AsyncIterator[bytes]:
            words = reply.split(" ")
            for i, word in enumerate(words):
                piece = word if i == 0 else " " + word
                chunk = {
                    "id": "cmpl-stub",
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
                }
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            last = {
                "id": "cmpl-stub",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            }
            yield f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode()

        return StreamingResponse(events(), media_type="text/event-stream")

    return app
