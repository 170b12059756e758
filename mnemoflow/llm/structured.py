"""The validate → retry-once → raise loop every engine shares, so the LLM port contract lives in one place.

An engine only supplies ``send``: one round-trip to its model for one :class:`StructuredRequest`, returning a
:class:`RawReply` (transport retries are the engine's business). Everything the contract promises about
output — strict schema up front, pydantic validation, one retry carrying the validation error,
:class:`StructuredOutputError` after that, usage recorded for every call — happens here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mnemoflow.errors import InvalidInput, StructuredOutputError
from mnemoflow.llm.schema import schema_name, strict_json_schema
from mnemoflow.llm.usage import CallRecord, LLMUsage
from mnemoflow.ports.llm import ChatMessage

M = TypeVar("M", bound=BaseModel)

MAX_ATTEMPTS = 2
"""The first try plus one retry with the validation error; more rarely helps a model that failed twice."""
_ECHO_CHARS = 4000
"""How much of an invalid reply is echoed back in the retry: enough to show the mistake, bounded in tokens."""


@dataclass(frozen=True, slots=True)
class StructuredRequest:
    """What an engine sends for one attempt."""

    messages: list[ChatMessage]
    output_model: type[BaseModel]
    schema: dict[str, Any]
    schema_name: str
    max_tokens: int
    temperature: float
    stage: str
    attempt: int


@dataclass(frozen=True, slots=True)
class RawReply:
    """The model's raw text for one attempt and the tokens the server counted (0 when it did not say)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None


SendFn = Callable[[StructuredRequest], Awaitable[RawReply]]


def validate_reply(output_model: type[M], text: str) -> M:
    """The reply validated as JSON; failing that, parsed with raw control characters allowed inside strings, then
    validated. Why: a model under a generic JSON grammar (an OpenAI-compatible server's ``json_object`` format)
    writes a line break inside a string as it is, not as ``\\n`` (SmolLM2 through llama.cpp's server did), and such
    a reply says exactly what an escaped one says. Raises the JSON error when even that does not parse."""
    try:
        return output_model.model_validate_json(text)
    except ValidationError as exc:
        try:
            loose = json.loads(text, strict=False)
        except ValueError:
            raise exc from None
        return output_model.model_validate(loose)  # its values' errors, if any, are what the repair must fix


def repair_messages(reply: RawReply, error: ValidationError) -> list[ChatMessage]:
    """The messages appended for the retry: the invalid reply and what was wrong with it.

    A reply refused only for what its values say (every error a ``value_error``: a loop, an invented number) is not
    echoed: its shape was right, and echoing a loop primed it again (Qwen2.5 0.5B wrote the same persona line 16
    times in the repair try after seeing it; without the echo it wrote a valid persona)."""
    errors = error.errors(include_url=False)
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in errors[:10])
    hint = " The reply was cut off at the token limit; answer more briefly." if reply.finish_reason == "length" else ""
    if all(e["type"] == "value_error" for e in errors):
        return [
            ChatMessage(
                role="user",
                content=f"Your reply was refused ({problems}).{hint} "
                "Reply again with only one JSON object that matches the schema.",
            )
        ]
    return [
        ChatMessage(role="assistant", content=reply.text[:_ECHO_CHARS]),
        ChatMessage(
            role="user",
            content=f"That reply does not match the required JSON schema ({problems}).{hint} "
            "Reply again with only one JSON object that matches the schema.",
        ),
    ]


async def complete_structured(
    send: SendFn,
    messages: list[ChatMessage],
    output_model: type[M],
    *,
    max_tokens: int,
    temperature: float,
    stage: str,
    usage: LLMUsage,
    timer: Callable[[], float] = time.perf_counter,
) -> M:
    """Run the port contract around ``send``; see :mod:`mnemoflow.ports.llm`."""
    if max_tokens < 1:
        raise InvalidInput(f"max_tokens must be >= 1, got {max_tokens}")
    if not messages:
        raise InvalidInput("messages must not be empty")
    schema = strict_json_schema(output_model)  # ConfigError for unbounded lists, before anything is sent
    name = schema_name(output_model)
    convo = list(messages)
    started = timer()
    prompt_tokens = completion_tokens = attempts = 0

    def record(ok: bool, error: BaseException | None = None) -> None:
        usage.record(
            CallRecord(
                stage=stage,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                latency_s=timer() - started,
                attempts=attempts,
                ok=ok,
                error=None if error is None else type(error).__name__,
            )
        )

    try:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            attempts = attempt
            request = StructuredRequest(convo, output_model, schema, name, max_tokens, temperature, stage, attempt)
            reply = await send(request)
            prompt_tokens += reply.prompt_tokens
            completion_tokens += reply.completion_tokens
            try:
                result = validate_reply(output_model, reply.text)
            except ValidationError as exc:
                last_reply, last_error = reply, exc
                convo = [*messages, *repair_messages(reply, exc)]
                continue
            record(ok=True)
            return result
        raise StructuredOutputError(
            f"stage {stage!r}: output did not match {output_model.__name__} after {MAX_ATTEMPTS} attempts: "
            f"{last_error.error_count()} validation error(s), first: {last_error.errors(include_url=False)[0]['msg']}",
            raw_text=last_reply.text,
            stage=stage,
        )
    except BaseException as exc:  # recorded, then re-raised unchanged (cancellation included)
        record(ok=False, error=exc)
        raise


class StructuredEngine:
    """Base of every engine: a subclass sets ``usage`` (and may set ``timer``) and implements ``_send``.

    ``complete`` is the port's method, the same for all engines: it hands ``_send`` to
    :func:`complete_structured`.
    """

    usage: LLMUsage
    timer: Callable[[], float] = staticmethod(time.perf_counter)

    async def _send(self, request: StructuredRequest) -> RawReply:
        raise NotImplementedError

    async def complete(
        self,
        messages: list[ChatMessage],
        output_model: type[M],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        stage: str = "default",
    ) -> M:
        return await complete_structured(
            self._send,
            messages,
            output_model,
            max_tokens=max_tokens,
            temperature=temperature,
            stage=stage,
            usage=self.usage,
            timer=self.timer,
        )
