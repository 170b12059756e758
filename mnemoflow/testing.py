"""Public fakes for tests of code built on mnemoflow: a scripted LLM, a manual clock, a fake OpenAI server.

Why public: code that depends on the ports should be testable without a model or a wall clock, with fakes that
obey the same contracts as the real adapters (the LLM contract tests run against :class:`ScriptedLLM` too).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mnemoflow.llm.fake_server import FakeOpenAIServer, FakeReply, FakeStall, FakeStatus
from mnemoflow.llm.structured import RawReply, StructuredEngine, StructuredRequest
from mnemoflow.llm.usage import LLMUsage
from mnemoflow.ports.llm import ChatMessage

__all__ = [
    "FakeOpenAIServer",
    "FakeReply",
    "FakeStall",
    "FakeStatus",
    "ListBus",
    "ManualClock",
    "ScriptedCall",
    "ScriptedLLM",
    "files_holding",
]


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One request :class:`ScriptedLLM` received (a validation retry is a second call with ``attempt=2``)."""

    messages: list[ChatMessage]
    output_model: type[BaseModel]
    schema: dict[str, Any]
    max_tokens: int
    temperature: float
    stage: str
    attempt: int


Response = str | BaseModel | BaseException | Callable[[ScriptedCall], "str | BaseModel"]
"""Raw reply text, a model instance (sent as its JSON), an exception to raise, or a function of the call."""


class ScriptedLLM(StructuredEngine):
    """The LLM port answering from a list of canned responses, one per request, in order.

    Output goes through the same validate → retry-once → :class:`~mnemoflow.errors.StructuredOutputError` path
    as every engine, so an invalid canned string exercises the retry. Running out of responses is a test bug
    and raises ``AssertionError``.
    """

    def __init__(
        self,
        responses: Iterable[Response] = (),
        *,
        usage: LLMUsage | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._responses: deque[Response] = deque(responses)
        self.calls: list[ScriptedCall] = []
        self.usage = usage if usage is not None else LLMUsage()
        self.timer = timer

    def push(self, *responses: Response) -> None:
        self._responses.extend(responses)

    async def _send(self, request: StructuredRequest) -> RawReply:
        call = ScriptedCall(
            list(request.messages),
            request.output_model,
            request.schema,
            request.max_tokens,
            request.temperature,
            request.stage,
            request.attempt,
        )
        self.calls.append(call)
        if not self._responses:
            raise AssertionError(f"ScriptedLLM ran out of responses at call {len(self.calls)} (stage {call.stage!r})")
        response = self._responses.popleft()
        if isinstance(response, BaseException):
            raise response
        if callable(response) and not isinstance(response, BaseModel):
            response = response(call)
        text = response.model_dump_json() if isinstance(response, BaseModel) else response
        prompt_tokens = sum(len(m.content.split()) for m in request.messages)
        return RawReply(
            text=text, prompt_tokens=prompt_tokens, completion_tokens=len(text.split()), finish_reason="stop"
        )


class ManualClock:
    """A :class:`~mnemoflow.ports.clock.Clock` that moves only when told; ``monotonic`` serves as a timer."""

    def __init__(self, start: datetime = datetime(2025, 1, 1, tzinfo=UTC)) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._elapsed = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        """Seconds advanced so far; pass ``clock.monotonic`` where a ``timer`` is taken."""
        return self._elapsed

    def advance(self, by: float | timedelta) -> datetime:
        """Move forward by seconds or a timedelta (never backwards) and return the new time."""
        delta = by if isinstance(by, timedelta) else timedelta(seconds=by)
        if delta < timedelta(0):
            raise ValueError("ManualClock cannot go backwards")
        self._now += delta
        self._elapsed += delta.total_seconds()
        return self._now


class ListBus:
    """An event bus (``serving.bus.EventBus``) that keeps what it was asked to publish, for API tests."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[tuple[str, bytes, int | None]]]] = []
        self.headers: list[list[tuple[str, bytes]] | None] = []
        """The headers of each publish in ``sent`` (None: none given)."""

    async def publish(
        self,
        topic: str,
        records: Sequence[tuple[str, bytes, int | None]],
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> None:
        self.sent.append((topic, list(records)))
        self.headers.append(None if headers is None else list(headers))

    async def close(self) -> None:
        pass


def files_holding(root: Path, needles: Iterable[bytes]) -> dict[str, list[str]]:
    """Which files under ``root`` (any depth, every byte, index and logs included) hold which needle: the check
    that an erase left nothing of someone behind. ``{needle: [relative paths]}``, only needles found."""
    wanted = list(needles)
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            for needle in wanted:
                if needle in data:
                    found.setdefault(needle.decode(errors="replace"), []).append(str(path.relative_to(root)))
    return found


def l1_settled(files: Any, tenant: str, users: Iterable[str]) -> bool:
    """Every user's turns are in L0, L1 has consumed all of it, and no pass is pending or running (tests of the
    real stack wait for this; L0 alone can hold a turn whose pass has not been scheduled yet)."""
    from mnemoflow.memory.l0 import read_l0
    from mnemoflow.memory.l1.state import load_cursor, load_triggers

    for user in users:
        state, landed = load_triggers(files, tenant, user), len(read_l0(files, tenant, user, limit=10**7))
        if not landed or state.pending or state.running or sum(load_cursor(files, tenant, user).done.values()) < landed:
            return False
    return True
