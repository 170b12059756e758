"""LLM port: every model call names a pydantic output model and gets a validated instance back (docs/DESIGN.md §6).

Why a port: memory stages (L1 extraction, offload summaries, canvas operations) must not care whether the
model runs in vLLM, behind an OpenAI-compatible URL, in-process, or is a scripted fake in a test. The
contract below is checked by ``tests/unit/test_llm_contract.py`` against every engine.

Contract (every engine):

* **Async-native.** ``complete`` is a coroutine; engines do real async I/O (or none), never hide a blocking
  call behind ``async``.
* **Structured.** The engine enforces the output model's JSON schema where it can (OpenAI ``response_format``
  ``json_schema`` with ``strict``, vLLM guided decoding, a llama.cpp grammar). The schema comes from
  :func:`mnemoflow.llm.schema.strict_json_schema`, which refuses a model with a list that has no
  ``max_length`` (``maxItems``): measured, small models loop until cut off without that bound. This is raised
  as :class:`~mnemoflow.errors.ConfigError` before any request is sent.
* **Validated, retried once.** The raw reply is validated with pydantic (never regex-scraped). On a
  validation failure the call is retried once with the raw reply and the validation error appended to the
  messages; a second failure raises :class:`~mnemoflow.errors.StructuredOutputError` carrying the raw text.
* **Bounded.** ``max_tokens`` is passed to the model on every request.
* **Errors.** Transport failures are retried with backoff inside the engine; when retries run out the engine
  raises :class:`~mnemoflow.errors.ServiceUnavailable`. A request the server refuses (4xx other than 429) is
  not retried: :class:`~mnemoflow.errors.ConfigError` for 401/403/404 (wrong key, URL or model name),
  :class:`~mnemoflow.errors.InvalidInput` otherwise. Nothing but ``MnemoflowError`` subclasses escapes.
* **Accounted.** Every ``complete`` call, successful or not, is recorded in the engine's ``usage``
  (:class:`mnemoflow.llm.usage.LLMUsage`, injectable so several engines can share one): prompt and completion
  tokens, latency, stage, attempts and ok/failed, with per-stage totals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from mnemoflow.llm.usage import LLMUsage

M = TypeVar("M", bound=BaseModel)


class ChatMessage(BaseModel):
    """One chat message as OpenAI-compatible servers take it. Prompts build these; engines only send them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str


@runtime_checkable
class LLM(Protocol):
    """A chat model that returns validated structured output. See the module docstring for the contract."""

    @property
    def usage(self) -> LLMUsage:
        """The recorder every call of this engine reports to."""
        ...

    async def complete(
        self,
        messages: list[ChatMessage],
        output_model: type[M],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        stage: str = "default",
    ) -> M:
        """Ask the model and return its reply parsed as ``output_model``; ``stage`` names the caller in usage."""
        ...
