"""The sync and async clients: thin shells that send the calls of :mod:`mnemoflow.client.calls` over httpx.

Retries are safe because every write is idempotent by its id (a turn's ``message_id``, a result's
``tool_call_id``): a batch resent after a lost answer stores nothing twice. What is retried: no answer at all
(connect, read or write errors), 429 (after the server's ``Retry-After`` when it is longer than our wait) and 502,
503, 504; with the waits of :class:`~mnemoflow.retry.RetryPolicy`, the one retry policy of the project. Anything
else raises its typed error (:mod:`mnemoflow.client.errors`) at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import date
from typing import Any, Literal, TypeVar

import httpx

from mnemoflow.client import calls
from mnemoflow.client.calls import Call, Pages
from mnemoflow.client.errors import ApiUnreachable, _retry_after, error_for
from mnemoflow.client.models import AtomDrillDown, ConversationHitOut, DrilledEntry, LearntOut, SkillSummary
from mnemoflow.events import ToolResultIn, TurnIn
from mnemoflow.governance.listing import AtomFilter, AtomVersion
from mnemoflow.governance.operations import OperationStatus
from mnemoflow.memory.l0 import L0Message
from mnemoflow.memory.l1.models import L1Record
from mnemoflow.memory.recall.recaller import RecallHit, RecallResult
from mnemoflow.offload.entries import OffloadEntry
from mnemoflow.offload.replies import CompactReply
from mnemoflow.offload.session_state import SessionState
from mnemoflow.retry import RetryPolicy

T = TypeVar("T")
AtomKind = Literal["persona", "episodic", "instruction"]

RETRIED_STATUSES = frozenset({429, 502, 503, 504})
DEFAULT_RETRY = RetryPolicy(attempts=5, base_delay=0.2, max_delay=5.0)


def _wait(policy: RetryPolicy, failures: int, response: httpx.Response | None) -> float | None:
    """Seconds to wait before the next try after ``failures`` failures in a row; None: stop trying."""
    wait = policy.retry_after(failures)
    if wait is not None and response is not None and response.status_code == 429:
        wait = max(wait, min(_retry_after(response), policy.max_delay * 6))
    return wait


def _final(call: Call[T], response: httpx.Response) -> T:
    if response.status_code < 400 or response.status_code in call.answers:
        return call.parse(response)
    raise error_for(response)


def _request(call: Call[Any]) -> dict[str, Any]:
    """The request's parts but method and path, one place for both clients (the async one once dropped the headers,
    and with them an operation's Idempotency-Key)."""
    return {"json": call.json, "content": call.content, "params": call.params or None, "headers": call.headers or None}


def _headers(api_key: str, headers: dict[str, str] | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", **(headers or {})}


class Client:
    """Synchronous client. ``http`` replaces the httpx client (a test client, custom TLS); it gets the key header.

    ``agent`` and ``team``: the agent this client is (docs/concepts/scopes.md), named on the events it submits and
    on its recalls; with a key bound to an agent, leave them out (or name the same).

    >>> with Client("http://127.0.0.1:8000", "KEY") as mf:  # doctest: +SKIP
    ...     mf.submit([TurnIn(message_id="m1", user="u", session="s", role="user", content="I live in Porto")])
    ...     print(mf.recall("u", "where do I live?").prepend_context)
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        headers: dict[str, str] | None = None,
        http: httpx.Client | None = None,
        agent: str | None = None,
        team: str | None = None,
    ) -> None:
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self._http.headers.update(_headers(api_key, headers))
        self._retry = retry
        self._acting = calls.Acting(agent, team)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call[T]) -> T:
        failures = 0
        while True:
            try:
                response = self._http.request(call.method, call.path, **_request(call))
            except httpx.TransportError as exc:
                failures += 1
                if (wait := _wait(self._retry, failures, None)) is None:
                    raise ApiUnreachable(f"{call.method} {call.path}: {exc!r} after {failures} tries") from exc
                time.sleep(wait)
                continue
            if response.status_code in RETRIED_STATUSES - call.answers:
                failures += 1
                if (wait := _wait(self._retry, failures, response)) is not None:
                    time.sleep(wait)
                    continue
            return _final(call, response)

    def _iterate(self, pages: Pages[T]) -> Iterator[T]:
        page: list[T] | None = None
        while (call := pages.next_call(page)) is not None:
            page = self.send(call)
            yield from page

    def submit(self, items: Sequence[TurnIn | ToolResultIn], batch: int = 200) -> int:
        """Turns and tool results in order, in batches of one kind; returns how many Kafka acknowledged."""
        return sum(self.send(calls.submit(chunk, self._acting)) for chunk in calls.batches(items, batch))

    def whoami(self) -> str:
        return self.send(calls.whoami())

    def recall(self, user: str, query: str) -> RecallResult:
        return self.send(calls.recall(user, query, self._acting))

    def memory_search(self, user: str, query: str, limit: int = 5, type: AtomKind | None = None) -> list[RecallHit]:
        return self.send(calls.memory_search(user, query, limit, type, self._acting))

    def conversation_search(
        self, user: str, query: str, limit: int = 5, session: str | None = None
    ) -> list[ConversationHitOut]:
        return self.send(calls.conversation_search(user, query, limit, session, self._acting))

    def conversations(self, user: str, day: date | None = None, page_size: int = 1000) -> Iterator[L0Message]:
        """Every L0 message of the user (or of one day), fetched a page at a time."""
        return self._iterate(calls.conversation_pages(user, day, page_size))

    def atom(self, user: str, atom_id: str) -> AtomDrillDown:
        return self.send(calls.atom(user, atom_id))

    def persona(self, user: str, scope: str | None = None) -> str:
        return self.send(calls.persona(user, scope))

    def scenes(self, user: str, scope: str | None = None) -> list[dict[str, Any]]:
        return self.send(calls.scenes(user, scope))

    def scene(self, user: str, name: str, scope: str | None = None) -> str:
        return self.send(calls.scene(user, name, scope))

    def skills(self, scope: str | None = None) -> list[SkillSummary]:
        return self.send(calls.skills(scope))

    def search_skills(self, query: str, limit: int = 3) -> list[SkillSummary]:
        return self.send(calls.search_skills(query, limit))

    def skill(self, name: str, scope: str | None = None) -> str:
        return self.send(calls.skill(name, scope))

    def edit_skill(self, name: str, text: str, scope: str | None = None) -> SkillSummary:
        return self.send(calls.edit_skill(name, text, scope))

    def delete_skill(self, name: str, scope: str | None = None) -> None:
        return self.send(calls.delete_skill(name, scope))

    def skill_history(self, name: str, scope: str | None = None) -> list[int]:
        return self.send(calls.skill_history(name, scope))

    def export_skills(self, scope: str | None = None, history: bool = False) -> bytes:
        return self.send(calls.export_skills(scope, history))

    def import_skills(self, bundle: bytes) -> list[LearntOut]:
        return self.send(calls.import_skills(bundle))

    def distil_skills(self, session: str, scope: str | None = None) -> list[LearntOut]:
        return self.send(calls.distil_skills(session, scope))

    def remember(
        self, user: str, text: str, type: AtomKind | None = None, priority: int | None = None, wait: float = 0
    ) -> OperationStatus:
        return self.send(calls.remember(user, text, type, priority, wait))

    def forget(self, user: str, atom_id: str, wait: float = 0) -> OperationStatus:
        return self.send(calls.forget(user, atom_id, wait))

    def atoms(self, user: str, where: AtomFilter | None = None, page_size: int = 100) -> Iterator[L1Record]:
        """The user's live atoms, oldest first, filtered, fetched a page at a time."""
        return self._iterate(calls.atom_pages(user, where, page_size))

    def history(self, user: str, atom_id: str) -> list[AtomVersion]:
        return self.send(calls.history(user, atom_id))

    def edit(
        self,
        user: str,
        atom_id: str,
        text: str | None = None,
        type: AtomKind | None = None,
        priority: int | None = None,
        wait: float = 0,
    ) -> OperationStatus:
        return self.send(calls.edit(user, atom_id, text, type, priority, wait))

    def erase_user(self, user: str, wait: float = 0) -> OperationStatus:
        return self.send(calls.erase_user(user, wait))

    def erase_session(self, session: str, wait: float = 0) -> OperationStatus:
        return self.send(calls.erase_session(session, wait))

    def export(self, user: str, sessions: bool = False) -> bytes:
        return self.send(calls.export(user, sessions))

    def import_bundle(self, user: str, bundle: bytes, wait: float = 0) -> OperationStatus:
        return self.send(calls.import_bundle(user, bundle, wait))

    def operation(self, operation_id: str, wait: float = 0) -> OperationStatus:
        return self.send(calls.operation(operation_id, wait))

    def end_session(self, session: str, user: str) -> None:
        self.send(calls.end_session(session, user))

    def compact(self, session: str, messages: list[dict[str, Any]], window: int) -> CompactReply:
        return self.send(calls.compact(session, messages, window))

    def offload(self, session: str, after_seq: int = -1) -> Iterator[OffloadEntry]:
        """The session's offload entries after ``after_seq``, fetched until no new one comes."""
        return self._iterate(calls.offload_pages(session, after_seq))

    def ref(self, session: str, tool_call_id: str) -> bytes:
        return self.send(calls.ref(session, tool_call_id))

    def node(self, session: str, node_id: str) -> list[DrilledEntry]:
        return self.send(calls.node(session, node_id))

    def canvases(self, session: str) -> list[str]:
        return self.send(calls.canvases(session))

    def canvas(self, session: str, name: str) -> str:
        return self.send(calls.canvas(session, name))

    def state(self, session: str) -> SessionState:
        return self.send(calls.state(session))

    def health(self) -> dict[str, Any]:
        return self.send(calls.health())


class AsyncClient:
    """Asynchronous client: the same methods as :class:`Client`, awaited (iterators are async iterators)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        headers: dict[str, str] | None = None,
        http: httpx.AsyncClient | None = None,
        agent: str | None = None,
        team: str | None = None,
    ) -> None:
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        self._http.headers.update(_headers(api_key, headers))
        self._retry = retry
        self._acting = calls.Acting(agent, team)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        failures = 0
        while True:
            try:
                response = await self._http.request(call.method, call.path, **_request(call))
            except httpx.TransportError as exc:
                failures += 1
                if (wait := _wait(self._retry, failures, None)) is None:
                    raise ApiUnreachable(f"{call.method} {call.path}: {exc!r} after {failures} tries") from exc
                await asyncio.sleep(wait)
                continue
            if response.status_code in RETRIED_STATUSES - call.answers:
                failures += 1
                if (wait := _wait(self._retry, failures, response)) is not None:
                    await asyncio.sleep(wait)
                    continue
            return _final(call, response)

    async def _iterate(self, pages: Pages[T]) -> AsyncIterator[T]:
        page: list[T] | None = None
        while (call := pages.next_call(page)) is not None:
            page = await self.send(call)
            for item in page:
                yield item

    async def submit(self, items: Sequence[TurnIn | ToolResultIn], batch: int = 200) -> int:
        return sum([await self.send(calls.submit(chunk, self._acting)) for chunk in calls.batches(items, batch)])

    async def whoami(self) -> str:
        return await self.send(calls.whoami())

    async def recall(self, user: str, query: str) -> RecallResult:
        return await self.send(calls.recall(user, query, self._acting))

    async def memory_search(
        self, user: str, query: str, limit: int = 5, type: AtomKind | None = None
    ) -> list[RecallHit]:
        return await self.send(calls.memory_search(user, query, limit, type, self._acting))

    async def conversation_search(
        self, user: str, query: str, limit: int = 5, session: str | None = None
    ) -> list[ConversationHitOut]:
        return await self.send(calls.conversation_search(user, query, limit, session, self._acting))

    def conversations(self, user: str, day: date | None = None, page_size: int = 1000) -> AsyncIterator[L0Message]:
        return self._iterate(calls.conversation_pages(user, day, page_size))

    async def atom(self, user: str, atom_id: str) -> AtomDrillDown:
        return await self.send(calls.atom(user, atom_id))

    async def persona(self, user: str, scope: str | None = None) -> str:
        return await self.send(calls.persona(user, scope))

    async def scenes(self, user: str, scope: str | None = None) -> list[dict[str, Any]]:
        return await self.send(calls.scenes(user, scope))

    async def scene(self, user: str, name: str, scope: str | None = None) -> str:
        return await self.send(calls.scene(user, name, scope))

    async def skills(self, scope: str | None = None) -> list[SkillSummary]:
        return await self.send(calls.skills(scope))

    async def search_skills(self, query: str, limit: int = 3) -> list[SkillSummary]:
        return await self.send(calls.search_skills(query, limit))

    async def skill(self, name: str, scope: str | None = None) -> str:
        return await self.send(calls.skill(name, scope))

    async def edit_skill(self, name: str, text: str, scope: str | None = None) -> SkillSummary:
        return await self.send(calls.edit_skill(name, text, scope))

    async def delete_skill(self, name: str, scope: str | None = None) -> None:
        return await self.send(calls.delete_skill(name, scope))

    async def skill_history(self, name: str, scope: str | None = None) -> list[int]:
        return await self.send(calls.skill_history(name, scope))

    async def export_skills(self, scope: str | None = None, history: bool = False) -> bytes:
        return await self.send(calls.export_skills(scope, history))

    async def import_skills(self, bundle: bytes) -> list[LearntOut]:
        return await self.send(calls.import_skills(bundle))

    async def distil_skills(self, session: str, scope: str | None = None) -> list[LearntOut]:
        return await self.send(calls.distil_skills(session, scope))

    async def remember(
        self, user: str, text: str, type: AtomKind | None = None, priority: int | None = None, wait: float = 0
    ) -> OperationStatus:
        return await self.send(calls.remember(user, text, type, priority, wait))

    async def forget(self, user: str, atom_id: str, wait: float = 0) -> OperationStatus:
        return await self.send(calls.forget(user, atom_id, wait))

    def atoms(self, user: str, where: AtomFilter | None = None, page_size: int = 100) -> AsyncIterator[L1Record]:
        return self._iterate(calls.atom_pages(user, where, page_size))

    async def history(self, user: str, atom_id: str) -> list[AtomVersion]:
        return await self.send(calls.history(user, atom_id))

    async def edit(
        self,
        user: str,
        atom_id: str,
        text: str | None = None,
        type: AtomKind | None = None,
        priority: int | None = None,
        wait: float = 0,
    ) -> OperationStatus:
        return await self.send(calls.edit(user, atom_id, text, type, priority, wait))

    async def erase_user(self, user: str, wait: float = 0) -> OperationStatus:
        return await self.send(calls.erase_user(user, wait))

    async def erase_session(self, session: str, wait: float = 0) -> OperationStatus:
        return await self.send(calls.erase_session(session, wait))

    async def export(self, user: str, sessions: bool = False) -> bytes:
        return await self.send(calls.export(user, sessions))

    async def import_bundle(self, user: str, bundle: bytes, wait: float = 0) -> OperationStatus:
        return await self.send(calls.import_bundle(user, bundle, wait))

    async def operation(self, operation_id: str, wait: float = 0) -> OperationStatus:
        return await self.send(calls.operation(operation_id, wait))

    async def end_session(self, session: str, user: str) -> None:
        await self.send(calls.end_session(session, user))

    async def compact(self, session: str, messages: list[dict[str, Any]], window: int) -> CompactReply:
        return await self.send(calls.compact(session, messages, window))

    def offload(self, session: str, after_seq: int = -1) -> AsyncIterator[OffloadEntry]:
        return self._iterate(calls.offload_pages(session, after_seq))

    async def ref(self, session: str, tool_call_id: str) -> bytes:
        return await self.send(calls.ref(session, tool_call_id))

    async def node(self, session: str, node_id: str) -> list[DrilledEntry]:
        return await self.send(calls.node(session, node_id))

    async def canvases(self, session: str) -> list[str]:
        return await self.send(calls.canvases(session))

    async def canvas(self, session: str, name: str) -> str:
        return await self.send(calls.canvas(session, name))

    async def state(self, session: str) -> SessionState:
        return await self.send(calls.state(session))

    async def health(self) -> dict[str, Any]:
        return await self.send(calls.health())
