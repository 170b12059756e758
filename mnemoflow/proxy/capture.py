"""What of an agent's chat array is new, as turns and tool results with ids that make capture idempotent.

An OpenAI-style agent resends its whole conversation with every request. Each message gets an id derived from
what it is (session, role, text) and how many identical messages came before it in the array, so the same array
sent twice yields the same ids, which the sinks skip (L0 by message id, offload by tool_call_id). A
:class:`CaptureLog` remembers the ids a session already captured so that a request publishes only what is new,
not the whole history again; it is a cache plus a small file, never the source of idempotence.

Why occurrence and not position: an agent that trims its own history shifts every position, but the n-th "ok" of
a session stays the n-th "ok" until the agent drops an earlier "ok" (then one message is missed, never doubled).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mnemoflow.events import MAX_TEXT_CHARS, ToolResultIn, TurnIn
from mnemoflow.ids import check_id
from mnemoflow.lru import LRU
from mnemoflow.offload.messages import is_injected
from mnemoflow.ports import FileStore
from mnemoflow.replay import safe_id
from mnemoflow.storage import Layout

Message = dict[str, Any]


def text_of(content: Any) -> str:
    """The text a model reads in a message's ``content`` (a string, or a list of parts whose text parts count)."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(p.get("text") or "" if isinstance(p, dict) else str(p) for p in content)
    return json.dumps(content, ensure_ascii=False)


def turn_id(session: str, role: str, text: str, occurrence: int) -> str:
    digest = hashlib.sha256(f"{session}\0{role}\0{occurrence}\0{text}".encode()).hexdigest()[:24]
    return f"px-{digest}"


@dataclass(frozen=True)
class Capture:
    """What to publish for one request, and every id the array holds (new or not)."""

    turns: list[TurnIn]
    results: list[ToolResultIn]
    ids: frozenset[str]
    skipped: int = 0
    """Tool outputs too large for one event (``MAX_TEXT_CHARS``): forwarded, but not offloaded."""

    @property
    def new_ids(self) -> frozenset[str]:
        """The ids this capture publishes (``ids`` less what was captured before)."""
        return frozenset([t.message_id for t in self.turns] + [f"tool:{r.tool_call_id}" for r in self.results])


def _tool_call_id(raw: Any) -> str:
    raw = str(raw or "call")
    try:
        return check_id(raw)
    except ValueError:
        return safe_id(raw)


def plan_capture(
    messages: Sequence[Message],
    user: str,
    session: str,
    captured: frozenset[str],
    now: datetime,
    *,
    agent: str | None = None,
    team: str | None = None,
) -> Capture:
    """Turns (user and assistant text) and tool results (with their call's name and arguments) not in
    ``captured``, as the named agent's (none: the default agent's). System messages and mnemoflow's own injections
    are not conversation and are skipped."""
    seen: Counter[tuple[str, str]] = Counter()
    calls: dict[str, tuple[str, str]] = {}
    turns: list[TurnIn] = []
    results: list[ToolResultIn] = []
    ids: set[str] = set()
    skipped = 0
    for m in messages:
        role = m.get("role")
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {}
            args = fn.get("arguments", "")
            calls[str(call.get("id"))] = (fn.get("name") or "tool", args if isinstance(args, str) else json.dumps(args))
        if role in ("user", "assistant") and not is_injected(m):
            text = text_of(m.get("content")).strip()
            if not text:
                continue
            seen[(role, text)] += 1
            mid = turn_id(session, role, text, seen[(role, text)])
            ids.add(mid)
            if mid not in captured:
                turns.append(
                    TurnIn(
                        message_id=mid,
                        user=user,
                        session=session,
                        role=role,
                        content=text[:MAX_TEXT_CHARS],
                        ts=now,
                        agent=agent,
                        team=team,
                    )
                )
        elif role == "tool":
            raw_id = m.get("tool_call_id")
            tid = _tool_call_id(raw_id)
            ids.add(f"tool:{tid}")
            if f"tool:{tid}" in captured:
                continue
            content = text_of(m.get("content"))
            if len(content) > MAX_TEXT_CHARS:
                skipped += 1
                continue
            name, args = calls.get(str(raw_id), ("tool", ""))
            results.append(
                ToolResultIn(
                    tool_call_id=tid,
                    session=session,
                    user=user,
                    tool_name=name[:256],
                    arguments=args,
                    content=content,
                    ts=now,
                    agent=agent,
                    team=team,
                )
            )
    return Capture(turns, results, frozenset(ids), skipped)


def answer_turn(
    messages: Sequence[Message],
    text: str,
    user: str,
    session: str,
    now: datetime,
    *,
    agent: str | None = None,
    team: str | None = None,
) -> TurnIn | None:
    """The upstream's answer as the assistant turn it will be when the agent sends it back next request (same
    id), or None when it has no text (a pure tool call)."""
    text = text.strip()
    if not text:
        return None
    earlier = sum(
        1
        for m in messages
        if m.get("role") == "assistant" and not is_injected(m) and text_of(m.get("content")).strip() == text
    )
    mid = turn_id(session, "assistant", text, earlier + 1)
    content = text[:MAX_TEXT_CHARS]
    return TurnIn(
        message_id=mid, user=user, session=session, role="assistant", content=content, ts=now, agent=agent, team=team
    )


class CaptureLog:
    """The ids each session already captured: an in-memory LRU in front of ``proxy-capture.json`` in the session
    folder. The file matters for one case: L0 skips a repeated id only within a day file, so a replica that lost
    its memory must not resend yesterday's history with today's timestamp."""

    FILE = "proxy-capture.json"

    def __init__(self, files: FileStore, capacity: int = 10_000) -> None:
        self._files = files
        self._cache: LRU[tuple[str, str], frozenset[str]] = LRU(capacity)

    def _path(self, tenant: str, session: str) -> str:
        return f"{Layout.session_dir(tenant, session)}/{self.FILE}"

    def captured(self, tenant: str, session: str) -> frozenset[str]:
        def load(key: tuple[str, str]) -> frozenset[str]:
            data = self._files.read_bytes(self._path(*key))
            try:
                return frozenset(json.loads(data)["ids"]) if data else frozenset()
            except (ValueError, KeyError, TypeError):
                return frozenset()  # a damaged file only costs a resend the sinks skip

        return self._cache.get_or_load((tenant, session), load)

    def record(self, tenant: str, session: str, ids: frozenset[str]) -> None:
        """Called once the new events are acknowledged by Kafka (so a failed publish is retried next request)."""
        merged = self.captured(tenant, session) | ids
        self._files.write_atomic(self._path(tenant, session), json.dumps({"ids": sorted(merged)}).encode())
        self._cache.put((tenant, session), merged)
