"""Chat arrays as compaction sees them: validation, tool-call units, fingerprints.

Why units: an assistant message with ``tool_calls`` and the tool results that answer it must stay together, or the
model's API rejects the array (a result without its call, a call without its result). Every drop in reclaim works
on whole :class:`Unit` s, so no rule can orphan a pair. Validation runs before anything else and raises
:class:`~mnemoflow.errors.InvalidInput` naming the first problem, so a malformed array is refused before any write.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from mnemoflow.errors import InvalidInput

Message = dict[str, Any]
ROLES = frozenset({"system", "user", "assistant", "tool"})
CANVAS_TAGS = ("<current_task_context", "<history_task_context")
"""Messages mnemoflow injected earlier start with one of these; they are removed and re-injected each call."""


@dataclass(frozen=True, slots=True)
class Unit:
    """Messages ``[start, end)`` that are dropped together: one plain message, or a call and its results."""

    start: int
    end: int
    tool_call_ids: tuple[str, ...] = ()


def call_ids(message: Message) -> list[str]:
    return [str(c.get("id")) for c in message.get("tool_calls") or ()]


def is_injected(message: Message) -> bool:
    content = message.get("content")
    return message.get("role") == "user" and isinstance(content, str) and content.startswith(CANVAS_TAGS)


def validate(messages: list[Message]) -> list[Message]:
    """Check the chat array and return it without earlier canvas injections; raise InvalidInput on a problem.

    Rules: known roles only; every tool result directly follows (after sibling results) the assistant message
    that called it; every call gets exactly one result before the next non-tool message; tool_call ids unique.
    """
    if not isinstance(messages, list):
        raise InvalidInput("messages must be a list of chat messages")
    open_ids: list[str] = []
    opened_at = -1
    seen: set[str] = set()
    out: list[Message] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidInput(f"message {i}: not an object")
        role = m.get("role")
        if role not in ROLES:
            raise InvalidInput(f"message {i}: unknown role {str(role)[:40]!r} (expected system, user, assistant, tool)")
        if role == "tool":
            tid = m.get("tool_call_id")
            if not isinstance(tid, str) or tid not in open_ids:
                raise InvalidInput(f"message {i}: tool result for {str(tid)[:80]!r} does not follow its tool call")
            open_ids.remove(tid)
        else:
            if open_ids:
                raise InvalidInput(f"message {opened_at}: tool call(s) {open_ids} have no result before message {i}")
            if role == "assistant":
                ids = call_ids(m)
                if dupes := [t for t in ids if t in seen or ids.count(t) > 1]:
                    raise InvalidInput(f"message {i}: duplicate tool_call id {dupes[0][:80]!r}")
                seen.update(ids)
                open_ids, opened_at = ids, i
        if not is_injected(m):
            out.append(m)
    if open_ids:
        raise InvalidInput(f"message {opened_at}: tool call(s) {open_ids} have no result")
    return out


def units(messages: list[Message]) -> list[Unit]:
    """Split a valid array into droppable units, in order."""
    out: list[Unit] = []
    i = 0
    while i < len(messages):
        ids = call_ids(messages[i]) if messages[i].get("role") == "assistant" else []
        j = i + 1
        while ids and j < len(messages) and messages[j].get("role") == "tool":
            j += 1
        out.append(Unit(i, j, tuple(ids)))
        i = j
    return out


def system_prefix(messages: list[Message]) -> int:
    """How many leading system messages there are: they are never dropped."""
    n = 0
    while n < len(messages) and messages[n].get("role") == "system":
        n += 1
    return n


def last_user(messages: list[Message]) -> int | None:
    """Index of the latest user message that is not a canvas injection, or None."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user" and not is_injected(messages[i]):
            return i
    return None


def fingerprint(message: Message) -> str:
    """Stable hash of what a model reads in a message: used to find a recorded cut point again next turn."""
    body = json.dumps(
        [message.get("role"), message.get("content"), call_ids(message), message.get("tool_call_id")],
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(body.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class ToolPair:
    """One tool call with its result, as summarisation sees it (arguments as the call's JSON text)."""

    tool_call_id: str
    tool_name: str
    arguments: str
    result: str
