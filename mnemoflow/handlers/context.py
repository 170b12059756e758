"""What every handler is given: time, the retry policy, and where blocking file work runs.

Why a writer thread: appends and their fsyncs take milliseconds to a second per batch; run on the event loop
they would stall the consumer's heartbeats and the other agents. One thread per worker, in submission order,
keeps the writers' caches single-threaded, as they were on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from pydantic import BaseModel

from mnemoflow.handlers.records import DeadLetter, RawRecord, parse_records
from mnemoflow.ports import Clock
from mnemoflow.retry import RetriesExhausted, RetryPolicy, Sleep

if TYPE_CHECKING:
    from mnemoflow.tracing import Tracing

T = TypeVar("T")
E = TypeVar("E", bound=BaseModel)
R = TypeVar("R")


class Blocking(Protocol):
    """Runs blocking work (files) off the event loop; awaiting the result gives what ``fn`` returned or raised."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


class WriterThread:
    """:class:`Blocking` on one thread of its own, in submission order."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mnemoflow-writer")

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]:
        return asyncio.get_running_loop().run_in_executor(self._pool, fn)


@dataclass(frozen=True, slots=True)
class Applied(Generic[E, R]):
    """A batch after :meth:`HandlerContext.apply`: the events written and what the write returned (``result``
    None: nothing parsed, or the write was parked), and the records parked with their reasons."""

    events: list[E]
    result: R | None
    parked: list[DeadLetter]


@dataclass(frozen=True)
class HandlerContext:
    clock: Clock
    retry: RetryPolicy
    blocking: Blocking
    sleep: Sleep = asyncio.sleep
    tracing: Tracing | None = None
    """None: tracing is off, and the handlers make no span and read no header."""

    async def apply(
        self, records: Sequence[RawRecord], model: type[E], what: str, write: Callable[[list[E]], R]
    ) -> Applied[E, R]:
        """Parse (parking what never parses), then ``write`` the events off the loop with retries, parking the
        batch's records with the last error when every try failed."""
        parsed = parse_records(model, records, f"{what} event", self.clock.now())
        if not parsed.events:
            return Applied([], None, parsed.parked)
        try:
            result = await self.retry.call(
                lambda: self.blocking(lambda: write(parsed.events)), f"write {what}", self.sleep
            )
        except RetriesExhausted as exc:
            now = self.clock.now()
            return Applied([], None, parsed.parked + [DeadLetter.of(r, str(exc), now) for r in parsed.records])
        return Applied(parsed.events, result, parsed.parked)
