"""Every API call as data: method, path, body and how to parse the answer. Pure: no I/O.

Why: the sync and the async client send the same calls; defining each endpoint once here keeps them thin shells
over one description (no sync/async twins of request building or parsing), and lets a unit test check a call
without a server.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from mnemoflow.client.models import (
    Accepted,
    AtomDrillDown,
    ConversationHitOut,
    DrilledEntry,
    LearntOut,
    SkillSummary,
    WhoAmI,
)
from mnemoflow.events import ToolResultIn, TurnIn
from mnemoflow.governance.listing import AtomFilter, AtomPage, AtomVersion
from mnemoflow.governance.operations import OperationStatus
from mnemoflow.ids import check_id
from mnemoflow.memory.l0 import L0Message
from mnemoflow.memory.l1.models import L1Record
from mnemoflow.memory.recall.recaller import RecallHit, RecallResult
from mnemoflow.memory.scenes.model import SAFE_SCENE_NAME
from mnemoflow.offload.entries import OffloadEntry
from mnemoflow.offload.replies import CompactReply
from mnemoflow.offload.session_state import SessionState
from mnemoflow.skills.model import NAME_PATTERN

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

MAX_BATCH_CHARS = 600_000
"""Content characters per batch, under the default 1 MiB body limit once JSON-escaped."""


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    content: bytes | None = None
    """A raw body (an import bundle) instead of ``json``."""
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    answers: frozenset[int] = frozenset()
    """Error statuses that are an answer to parse, not an error to raise or retry (``/health``'s 503)."""


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda r: model.model_validate_json(r.content)


def _list(model: type[M]) -> Callable[[httpx.Response], list[M]]:
    adapter = TypeAdapter(list[model])  # type: ignore[valid-type]  # the item model is a runtime argument
    return lambda r: adapter.validate_json(r.content)


def _text(r: httpx.Response) -> str:
    return r.text


def _seg(value: str) -> str:
    """A path segment: ids are checked here so that a bad id fails before a request, with the API's own rule."""
    return check_id(value)


def batches(items: Sequence[TurnIn | ToolResultIn], batch: int, max_chars: int = MAX_BATCH_CHARS) -> list[list[Any]]:
    """Consecutive runs of one kind, cut at ``batch`` items or about ``max_chars`` of content (the body limit)."""
    out: list[list[Any]] = []  # each inner list holds one kind (turns or tool results)
    chars = 0
    for item in items:
        full = bool(out) and (len(out[-1]) >= batch or chars + len(item.content) > max_chars)
        if not out or type(out[-1][0]) is not type(item) or full:
            out.append([])
            chars = 0
        out[-1].append(item)
        chars += len(item.content)
    return out


@dataclass(frozen=True)
class Acting:
    """The agent, and its team, a client acts as (docs/concepts/scopes.md): named on every submitted event that
    names none and on every recall. Neither: the default agent, or whatever the client's key is bound to."""

    agent: str | None = None
    team: str | None = None

    def body(self) -> dict[str, str]:
        """The fields a recall body gains: only those set, so a client naming no agent sends what it always did."""
        return {k: v for k, v in (("agent", self.agent), ("team", self.team)) if v is not None}

    def stamp(self, items: list[Any]) -> list[Any]:
        """Events of one kind with this agent and team where they name neither."""
        if not self.body():
            return items
        return [i if i.agent or i.team else i.model_copy(update=self.body()) for i in items]


def submit(items: list[TurnIn] | list[ToolResultIn], acting: Acting = Acting()) -> Call[int]:
    """One batch of one kind (see :func:`batches`); answers how many were accepted (all, once Kafka has them)."""
    items = acting.stamp(items)
    if isinstance(items[0], TurnIn):
        body = {"turns": [i.model_dump(mode="json") for i in items]}
        return Call("POST", "/v1/turns", lambda r: Accepted.model_validate_json(r.content).accepted, json=body)
    body = {"results": [i.model_dump(mode="json") for i in items]}
    return Call("POST", "/v1/tool-results", lambda r: Accepted.model_validate_json(r.content).accepted, json=body)


def whoami() -> Call[str]:
    return Call("GET", "/v1/whoami", lambda r: WhoAmI.model_validate_json(r.content).tenant)


def recall(user: str, query: str, acting: Acting = Acting()) -> Call[RecallResult]:
    body = {"user": user, "query": query, **acting.body()}
    return Call("POST", "/v1/recall", _model(RecallResult), json=body)


def memory_search(
    user: str,
    query: str,
    limit: int = 5,
    type: Literal["persona", "episodic", "instruction"] | None = None,
    acting: Acting = Acting(),
) -> Call[list[RecallHit]]:
    body = {"user": user, "query": query, "limit": limit, "type": type, **acting.body()}
    return Call("POST", "/v1/memory/search", _list(RecallHit), json=body)


def conversation_search(
    user: str, query: str, limit: int = 5, session: str | None = None, acting: Acting = Acting()
) -> Call[list[ConversationHitOut]]:
    body = {"user": user, "query": query, "limit": limit, "session": session, **acting.body()}
    return Call("POST", "/v1/conversations/search", _list(ConversationHitOut), json=body)


def conversations(user: str, day: date | None = None, offset: int = 0, limit: int = 1000) -> Call[list[L0Message]]:
    params: dict[str, Any] = {"offset": offset, "limit": limit}
    if day is not None:
        params["day"] = day.isoformat()
    return Call("GET", f"/v1/users/{_seg(user)}/conversations", _list(L0Message), params=params)


def atom(user: str, atom_id: str) -> Call[AtomDrillDown]:
    return Call("GET", f"/v1/users/{_seg(user)}/atoms/{_seg(atom_id)}", _model(AtomDrillDown))


def _scoped(scope: str | None) -> dict[str, Any]:
    return {} if scope is None else {"scope": scope}


def persona(user: str, scope: str | None = None) -> Call[str]:
    """``scope``: shared (the default), ``team:<team>`` or ``agent:<agent>``, one the key may see."""
    return Call("GET", f"/v1/users/{_seg(user)}/persona", _text, params=_scoped(scope))


def scenes(user: str, scope: str | None = None) -> Call[list[dict[str, Any]]]:
    return Call("GET", f"/v1/users/{_seg(user)}/scenes", lambda r: list(r.json()), params=_scoped(scope))


def scene(user: str, name: str, scope: str | None = None) -> Call[str]:
    """``name`` as the scene list gives it (a Chinese topic has a Chinese name); the API checks it."""
    if not SAFE_SCENE_NAME.fullmatch(name):
        raise ValueError(f"{name[:80]!r} is not a scene file name (word characters, '-', '_', '.', ending .md)")
    return Call("GET", f"/v1/users/{_seg(user)}/scenes/{quote(name)}", _text, params=_scoped(scope))


def _skill(name: str) -> str:
    if not re.fullmatch(NAME_PATTERN, name):
        raise ValueError(f"{name[:80]!r} is not a skill name (lower-case letters, digits, CJK and '-')")
    return quote(name)


def skills(scope: str | None = None) -> Call[list[SkillSummary]]:
    """``scope``: shared (the default) or ``agent:<agent>``, one the key may see."""
    return Call("GET", "/v1/skills", _list(SkillSummary), params=_scoped(scope))


def search_skills(query: str, limit: int = 3) -> Call[list[SkillSummary]]:
    return Call("POST", "/v1/skills/search", _list(SkillSummary), json={"query": query, "limit": limit})


def skill(name: str, scope: str | None = None) -> Call[str]:
    """Without ``scope``: the key's own agent's skill of that name, else the shared one."""
    return Call("GET", f"/v1/skills/{_skill(name)}", _text, params=_scoped(scope))


def edit_skill(name: str, text: str, scope: str | None = None) -> Call[SkillSummary]:
    body = text.encode()
    return Call("PUT", f"/v1/skills/{_skill(name)}", _model(SkillSummary), content=body, params=_scoped(scope))


def delete_skill(name: str, scope: str | None = None) -> Call[None]:
    return Call("DELETE", f"/v1/skills/{_skill(name)}", lambda r: None, params=_scoped(scope))


def skill_history(name: str, scope: str | None = None) -> Call[list[int]]:
    return Call(
        "GET", f"/v1/skills/{_skill(name)}/history", lambda r: [int(v) for v in r.json()], params=_scoped(scope)
    )


def export_skills(scope: str | None = None, history: bool = False) -> Call[bytes]:
    """The tenant's skills as a bundle (a tar, ``mnemoflow-skills-bundle`` v1): ``scope``'s, or every one the key
    sees; ``history`` adds the versions edits replaced."""
    return Call("GET", "/v1/skills/export", lambda r: r.content, params={**_scoped(scope), "history": history})


def import_skills(bundle: bytes) -> Call[list[LearntOut]]:
    """Fold a skills bundle into the tenant's skills (skip, merge or store each one: importing twice adds nothing)."""
    return Call("POST", "/v1/skills/import", _list(LearntOut), content=bundle)


def distil_skills(session: str, scope: str | None = None) -> Call[list[LearntOut]]:
    """Distil the session's long tasks into skills now (idempotent); ``scope`` defaults to the session's agent."""
    return Call("POST", f"/v1/sessions/{_seg(session)}/skills", _list(LearntOut), json={"scope": scope})


def _operation_key(*parts: object) -> dict[str, str]:
    """An ``Idempotency-Key`` derived from what the operation does: a resend (ours or the caller's) is the same
    operation, applied once."""
    digest = hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]
    return {"Idempotency-Key": f"sdk-{digest}"}


def remember(
    user: str, text: str, type: str | None = None, priority: int | None = None, wait: float = 0
) -> Call[OperationStatus]:
    """Direct write (``POST /v1/users/{user}/memories``): stored without extraction, through dedup. ``wait``
    seconds for it to be applied (the answer then says ``applied``), else it answers ``pending``."""
    body = {k: v for k, v in {"text": text, "type": type, "priority": priority}.items() if v is not None}
    return Call(
        "POST",
        f"/v1/users/{_seg(user)}/memories",
        _model(OperationStatus),
        json=body,
        params={"wait": wait},
        headers=_operation_key("remember", user, body),
    )


def forget(user: str, atom_id: str, wait: float = 0) -> Call[OperationStatus]:
    """Delete an atom (``DELETE /v1/users/{user}/atoms/{id}``): a tombstone, gone from the index and recall."""
    return Call(
        "DELETE",
        f"/v1/users/{_seg(user)}/atoms/{_seg(atom_id)}",
        _model(OperationStatus),
        params={"wait": wait},
        headers=_operation_key("forget", user, atom_id),
    )


def atoms(user: str, where: AtomFilter | None = None, limit: int = 100, cursor: str | None = None) -> Call[AtomPage]:
    """One page of the user's live atoms, oldest first, filtered (``GET /v1/users/{user}/atoms``)."""
    params: dict[str, Any] = {**(where or AtomFilter()).model_dump(mode="json", exclude_none=True), "limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", f"/v1/users/{_seg(user)}/atoms", _model(AtomPage), params=params)


def history(user: str, atom_id: str) -> Call[list[AtomVersion]]:
    """Every version of an atom, oldest first, with who or what made each."""
    return Call("GET", f"/v1/users/{_seg(user)}/atoms/{_seg(atom_id)}/history", _list(AtomVersion))


def edit(
    user: str,
    atom_id: str,
    text: str | None = None,
    type: str | None = None,
    priority: int | None = None,
    wait: float = 0,
) -> Call[OperationStatus]:
    """A new version superseding the atom (``PATCH``): re-embedded, marked manual; the fields left None keep."""
    body = {k: v for k, v in {"text": text, "type": type, "priority": priority}.items() if v is not None}
    key = _operation_key("edit", user, atom_id, body)
    path = f"/v1/users/{_seg(user)}/atoms/{_seg(atom_id)}"
    return Call("PATCH", path, _model(OperationStatus), json=body, params={"wait": wait}, headers=key)


def erase_user(user: str, wait: float = 0) -> Call[OperationStatus]:
    """Everything of the user, with a tombstone that keeps re-sent old turns out (``DELETE /v1/users/{user}``)."""
    key = _operation_key("erase-user", user)
    return Call("DELETE", f"/v1/users/{_seg(user)}", _model(OperationStatus), params={"wait": wait}, headers=key)


def erase_session(session: str, wait: float = 0) -> Call[OperationStatus]:
    """The session's refs, offload entries, annotations, canvases and state, with a tombstone."""
    key = _operation_key("erase-session", session)
    path = f"/v1/sessions/{_seg(session)}"
    return Call("DELETE", path, _model(OperationStatus), params={"wait": wait}, headers=key)


def export(user: str, sessions: bool = False) -> Call[bytes]:
    """The user's bundle (a tar, ``mnemoflow-user-bundle`` v1), whole in memory: bundles are bounded by the
    importing side's ``max_import_bytes`` anyway."""
    return Call("GET", f"/v1/users/{_seg(user)}/export", lambda r: r.content, params={"sessions": sessions})


def import_bundle(user: str, bundle: bytes, wait: float = 0) -> Call[OperationStatus]:
    """Load a bundle as ``user``: the worker writes its files and indexes its atoms. The key is the bundle's
    digest, so a resend of the same bundle is the same import."""
    key = _operation_key("import", user, hashlib.sha256(bundle).hexdigest())
    path = f"/v1/users/{_seg(user)}/import"
    return Call("POST", path, _model(OperationStatus), content=bundle, params={"wait": wait}, headers=key)


def operation(operation_id: str, wait: float = 0) -> Call[OperationStatus]:
    return Call("GET", f"/v1/operations/{_seg(operation_id)}", _model(OperationStatus), params={"wait": wait})


def end_session(session: str, user: str) -> Call[None]:
    return Call("POST", f"/v1/sessions/{_seg(session)}/end", lambda r: None, json={"user": user})


def compact(session: str, messages: list[dict[str, Any]], window: int) -> Call[CompactReply]:
    body = {"messages": messages, "window": window}
    return Call("POST", f"/v1/sessions/{_seg(session)}/compact", _model(CompactReply), json=body)


def offload(session: str, after_seq: int = -1) -> Call[list[OffloadEntry]]:
    path = f"/v1/sessions/{_seg(session)}/offload"
    return Call("GET", path, _list(OffloadEntry), params={"after_seq": after_seq})


def ref(session: str, tool_call_id: str) -> Call[bytes]:
    return Call("GET", f"/v1/sessions/{_seg(session)}/refs/{_seg(tool_call_id)}", lambda r: r.content)


def node(session: str, node_id: str) -> Call[list[DrilledEntry]]:
    return Call("GET", f"/v1/sessions/{_seg(session)}/nodes/{_seg(node_id)}", _list(DrilledEntry))


def canvases(session: str) -> Call[list[str]]:
    return Call("GET", f"/v1/sessions/{_seg(session)}/canvases", lambda r: [str(n) for n in r.json()])


def canvas(session: str, name: str) -> Call[str]:
    return Call("GET", f"/v1/sessions/{_seg(session)}/canvases/{_seg(name)}", _text)


def state(session: str) -> Call[SessionState]:
    return Call("GET", f"/v1/sessions/{_seg(session)}/state", _model(SessionState))


def health() -> Call[dict[str, Any]]:
    """Readiness; a 503 answer is a report too (``status: degraded``), so it is parsed, not raised."""
    return Call("GET", "/health", lambda r: dict(r.json()), answers=frozenset({503}))


@dataclass
class Pages(Generic[T]):
    """Pagination as a function: the call for the next page given the last page (None before the first), or
    None when done. Both clients loop over it, so neither repeats the paging rules."""

    next_call: Callable[[list[T] | None], Call[list[T]] | None]


def conversation_pages(user: str, day: date | None = None, page_size: int = 1000) -> Pages[L0Message]:
    """L0 by ``offset``: the next page starts where the last one ended; a short page is the last."""
    seen = 0

    def next_call(page: list[L0Message] | None) -> Call[list[L0Message]] | None:
        nonlocal seen
        if page is not None:
            if len(page) < page_size:
                return None
            seen += len(page)
        return conversations(user, day, offset=seen, limit=page_size)

    return Pages(next_call)


def offload_pages(session: str, after_seq: int = -1) -> Pages[OffloadEntry]:
    """Offload entries by ``seq``: the next page asks for entries after the last one seen; an empty page ends."""
    last = after_seq

    def next_call(page: list[OffloadEntry] | None) -> Call[list[OffloadEntry]] | None:
        nonlocal last
        if page is not None:
            if not page:
                return None
            last = page[-1].seq
        return offload(session, last)

    return Pages(next_call)


def atom_pages(user: str, where: AtomFilter | None = None, page_size: int = 100) -> Pages[L1Record]:
    """Live atoms by cursor: each page's ``next_cursor`` asks for the next; None ends."""
    cursor: str | None = None

    def parse(response: httpx.Response) -> list[L1Record]:
        nonlocal cursor
        page = AtomPage.model_validate_json(response.content)
        cursor = page.next_cursor
        return page.atoms

    def next_call(page: list[L1Record] | None) -> Call[list[L1Record]] | None:
        if page is not None and cursor is None:
            return None
        first = atoms(user, where, page_size, cursor)
        return Call(first.method, first.path, parse, params=first.params)

    return Pages(next_call)
