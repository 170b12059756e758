"""The reclaim ladder (docs/tdam-spec.md §5.7) as one pure function: messages + window + session context -> compacted
messages.

Order of work on every call, so the prompt prefix stays stable turn after turn:

1. **Re-apply** the persisted :class:`~mnemoflow.offload.decisions.ReclaimDecisions`: the head cut (found again by
   the fingerprint of the first kept message), dropped tool units, and summary stubs (their exact stored text).
1b. **Age rule** (mnemoflow, ``stub_keep_recent``; off in :meth:`OffloadConfig.spec`): tool results older than
   the last N are stubbed and their calls' arguments compacted, in batches, so the prompt is rewritten once per
   batch and only after the previous batch (the cached prefix before it survives). Stubs and compact arguments
   are final: persisted verbatim and never re-summarised.
2. **Aggressive** at ``0.85·window``: drop the oldest units (a message, or a call with its results) down to
   ``0.6·window``, stopping at the last user message; record the cut; inject history canvases of the dropped
   tool calls within ``0.2·window``.
3. **Mild** at ``0.5·window``: in the oldest 70 % of messages, replace tool results that have an offload entry by a
   three-line stub (summary, node, ref), highest replaceability score first (cascade 7 → 0); stop after
   ``mild_min_replacements`` once below the mild line. A stub longer than its original is not used.
4. **Emergency** at ``0.95·window`` or over the window: drop head units down to ``0.6·window``; if the last user
   message blocks that, stub every remaining tool result, then drop units after the last user message, then the
   canvases. System messages and the last user message are never dropped (the caller checked that they fit).

No rule drops half of a unit, so no tool call or result is orphaned. Tool outputs that leave the prompt are listed
with where they live (their ref), so nothing is lost: the raw bytes stay in ``refs/``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.decisions import ReclaimDecisions
from mnemoflow.offload.messages import Message, Unit, call_ids, fingerprint, last_user, system_prefix, units
from mnemoflow.tokens import message_tokens

Level = Literal["none", "mild", "aggressive", "emergency"]
_LEVELS: tuple[Level, ...] = ("none", "mild", "aggressive", "emergency")


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """What compaction needs to know about one offloaded tool call."""

    tool_call_id: str
    summary: str
    score: int | None
    ref: str
    node_id: str | None = None


@dataclass(slots=True)
class Work:
    """The mutable working copy the ladder edits (internal to one compaction)."""

    messages: list[Message]
    decisions: ReclaimDecisions
    extra_tokens: int = 0
    level: Level = "none"
    deleted: list[str] = field(default_factory=list)
    new: set[int] = field(default_factory=set)
    """``id()`` of messages rewritten in this call (not re-applied ones): where the prompt prefix changes."""
    dropped: bool = False
    """Whether this call dropped messages (the prefix then changes right after the system messages)."""
    counted: dict[int, tuple[Message, int]] = field(default_factory=dict)
    """``id()`` of a message -> the message (kept, so its id is not reused) and its tokens: the ladder sums the
    prompt after every step, and building a message's text to count it was a fifth of a compaction's CPU."""

    @property
    def changed(self) -> bool:
        return self.dropped or any(id(m) in self.new for m in self.messages)

    def change_end(self) -> int:
        """Index just after the last message rewritten in this call (the system prefix after a drop only)."""
        end = system_prefix(self.messages) if self.dropped else 0
        for i, m in enumerate(self.messages):
            if id(m) in self.new:
                end = i + 1
        return end

    def count(self, message: Message) -> int:
        """:func:`~mnemoflow.tokens.message_tokens` of ``message``, counted once per call (no rule edits a message
        in place: a rewrite is a new dict, so an id names the same content for the whole call)."""
        got = self.counted.get(id(message))
        if got is None:
            got = self.counted[id(message)] = (message, message_tokens(message))
        return got[1]

    def tokens(self) -> int:
        return sum(self.count(m) for m in self.messages) + self.extra_tokens

    def raise_level(self, level: Level) -> None:
        if _LEVELS.index(level) > _LEVELS.index(self.level):
            self.level = level


def stub_text(entry: EntryInfo) -> str:
    """The three-line stand-in for a tool result (docs/tdam-spec.md §5.7), fixed once chosen so the prefix stays
    stable."""
    summary = entry.summary.strip() or "(no summary yet)"
    return (
        f"[Offloaded tool result {entry.tool_call_id} | node: {entry.node_id or 'n/a'}]\n"
        f"Summary: {summary}\n"
        f"result_ref: {entry.ref} (raw output; drill down by id)"
    )


def reapply(work: Work) -> None:
    """Step 1: the head cut, dropped units and stubs of earlier turns."""
    d = work.decisions
    msgs = work.messages
    floor = system_prefix(msgs)
    if d.cut is not None:
        user = last_user(msgs)
        for i in range(floor, len(msgs)):
            if fingerprint(msgs[i]) == d.cut:
                cut_at = i if user is None else min(i, user)
                drop_range(work, floor, _unit_floor(msgs, cut_at))
                break
    deleted = set(d.deleted)
    if deleted:
        keep: list[Message] = []
        for unit in units(work.messages):
            if unit.tool_call_ids and set(unit.tool_call_ids) <= deleted:
                continue
            keep.extend(work.messages[unit.start : unit.end])
        work.messages = keep
    if d.replaced:
        work.messages = [
            {**m, "content": d.replaced[m["tool_call_id"]]}
            if m.get("role") == "tool" and m.get("tool_call_id") in d.replaced
            else m
            for m in work.messages
        ]
    if d.calls:
        work.messages = [_with_calls(m, d.calls) for m in work.messages]
    work.dropped = False  # re-applied drops are not changes of this call


def _with_calls(message: Message, args: Mapping[str, str]) -> Message:
    """``message`` with the arguments of its tool calls listed in ``args`` replaced (same object if none are)."""
    calls = message.get("tool_calls") or ()
    if message.get("role") != "assistant" or not any(str(c.get("id")) in args for c in calls):
        return message
    new_calls = [
        {**c, "function": {**(c.get("function") or {}), "arguments": args[str(c.get("id"))]}}
        if str(c.get("id")) in args
        else c
        for c in calls
    ]
    return {**message, "tool_calls": new_calls}


def _short(value: object, limit: int = 60) -> object:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "…"
    if isinstance(value, dict | list):
        text = json.dumps(value, ensure_ascii=False)
        return value if len(text) <= limit else "[object]"
    return value


@lru_cache(maxsize=2048)
def compact_arguments(arguments: str, node_id: str | None) -> str:
    """``{_offloaded, node_id, tool_call}`` with string args over 60 chars cut, big objects elided
    (docs/tdam-spec.md §5.7). Cached: the age rule weighs every old call again on every turn (a JSON parse and
    two dumps each), and the same arguments give the same text."""
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        parsed = arguments
    short = {k: _short(v) for k, v in parsed.items()} if isinstance(parsed, dict) else _short(parsed)
    text = json.dumps(short, ensure_ascii=False)
    if len(text) > 300:
        text = text[:299] + "…"
    return json.dumps({"_offloaded": True, "node_id": node_id, "tool_call": text}, ensure_ascii=False)


def compact_calls(work: Work, entries: Mapping[str, EntryInfo], aged: frozenset[str] = frozenset()) -> None:
    """Give assistant calls whose results are all stubbed (or ``aged``: past the age rule's recent window, even
    if too small to stub) compact arguments when shorter; final once chosen (the raw arguments stay in the entry)."""
    d = work.decisions
    added: dict[str, str] = {}
    for i, m in enumerate(work.messages):
        ids = call_ids(m) if m.get("role") == "assistant" else []
        if not ids or not all(t in d.replaced or t in aged for t in ids) or all(t in d.calls for t in ids):
            continue
        for c in m.get("tool_calls") or ():
            tid = str(c.get("id"))
            raw = str((c.get("function") or {}).get("arguments", ""))
            entry = entries.get(tid)
            short = compact_arguments(raw, entry.node_id if entry else None)
            if tid not in d.calls and len(short) < len(raw):
                added[tid] = short
        new = _with_calls(m, added)
        if new is not m:
            work.messages[i] = new
            work.new.add(id(new))
    if added:
        work.decisions = d.model_copy(update={"calls": {**d.calls, **added}})


def _unit_floor(msgs: list[Message], index: int) -> int:
    """The start of the unit that contains ``index`` (so a cut never lands inside a unit)."""
    for unit in units(msgs):
        if unit.start <= index < unit.end:
            return unit.start
    return index


def drop_range(work: Work, start: int, end: int) -> None:
    """Remove whole messages ``[start, end)`` (unit-aligned by the caller) and note their tool call ids."""
    for m in work.messages[start:end]:
        if m.get("role") == "tool":
            work.deleted.append(str(m.get("tool_call_id")))
    if end > start:
        work.dropped = True
    work.messages = work.messages[:start] + work.messages[end:]


def fold(work: Work, task_start: str) -> bool:
    """Drop everything between the system prefix and the user message that started the current task.

    Why: in a session of consecutive tasks, a finished task's tool loop is dead weight; its canvas (injected as a
    history canvas) and its refs keep it reachable. The cut point is the task's first user message, the same
    every turn, so the prompt prefix stays stable for the whole task.
    """
    msgs = work.messages
    floor = system_prefix(msgs)
    for i in range(floor, len(msgs)):
        if msgs[i].get("role") == "user" and fingerprint(msgs[i]) == task_start:
            start = _unit_floor(msgs, i)
            if start > floor:
                drop_range(work, floor, start)
                return True
            return False
    return False


def drop_head(work: Work, target: int) -> bool:
    """Drop oldest units after the system prefix, before the last user message, until ``tokens <= target``."""
    msgs = work.messages
    floor, user = system_prefix(msgs), last_user(msgs)
    stop = len(msgs) if user is None else user
    total = work.tokens()
    end = floor
    for unit in units(msgs):
        if total <= target:
            break
        if unit.start < floor or unit.end > stop:
            continue
        total -= sum(work.count(m) for m in msgs[unit.start : unit.end])
        end = unit.end
    if end == floor:
        return False
    drop_range(work, floor, end)
    return True


def mild(work: Work, window: int, entries: Mapping[str, EntryInfo], cfg: OffloadConfig, *, scan_all: bool) -> int:
    """Replace old tool results by stubs, best-replaceable first; returns how many were replaced."""
    msgs = work.messages
    limit = len(msgs) if scan_all else int(len(msgs) * cfg.mild_scan_ratio)
    candidates = []
    for i, m in enumerate(msgs[:limit]):
        tid = m.get("tool_call_id")
        if m.get("role") == "tool" and isinstance(tid, str) and tid in entries and tid not in work.decisions.replaced:
            score = entries[tid].score
            candidates.append((5 if score is None else score, i, entries[tid]))
    candidates.sort(key=lambda c: (-c[0], c[1]))
    line = int(cfg.mild_ratio * window)
    replaced: dict[str, str] = {}
    total = work.tokens()
    for _score, i, entry in candidates:
        if len(replaced) >= cfg.mild_min_replacements and total < line and not scan_all:
            break
        if scan_all and total <= line:
            break
        stub = stub_text(entry)
        old = msgs[i]
        new = {**old, "content": stub}
        saved = work.count(old) - work.count(new)
        if saved <= 0:
            continue
        msgs[i] = new
        work.new.add(id(new))
        total -= saved
        replaced[entry.tool_call_id] = stub
    if replaced:
        work.decisions = work.decisions.model_copy(update={"replaced": {**work.decisions.replaced, **replaced}})
    return len(replaced)


def _call_saving(message: Message, entries: Mapping[str, EntryInfo], known: Mapping[str, str]) -> int:
    """Tokens that compact arguments would save on an assistant call message (0 when not shorter)."""
    args: dict[str, str] = {}
    for c in message.get("tool_calls") or ():
        tid = str(c.get("id"))
        raw = str((c.get("function") or {}).get("arguments", ""))
        entry = entries.get(tid)
        short = compact_arguments(raw, entry.node_id if entry else None)
        if tid not in known and len(short) < len(raw):
            args[tid] = short
    return message_tokens(message) - message_tokens(_with_calls(message, args)) if args else 0


def stub_by_age(
    work: Work, entries: Mapping[str, EntryInfo], keep: int, batch: int, batch_tokens: int | None = None
) -> frozenset[str]:
    """Stub tool results older than the last ``keep`` and compact their calls' arguments, all at once when at
    least ``batch`` rewrites are due or they would save ``batch_tokens``; return the ids past the last ``keep``
    when that happens (empty otherwise).

    Why batches: every rewrite changes the prompt from that message on, so the model's cached prefix is lost
    there. Waiting for a batch rewrites the prompt once per several calls, and always just after the previous
    batch (the oldest raw results), so the stubs before it stay cached. Stubs and compact arguments are final.
    """
    msgs = work.messages
    d = work.decisions
    tools = [i for i, m in enumerate(msgs) if m.get("role") == "tool"]
    old = tools[: len(tools) - keep] if keep else tools
    old_ids = frozenset(str(msgs[i].get("tool_call_id")) for i in old)
    due: list[tuple[int, dict[str, Any], str]] = []
    saved = 0
    for i in old:
        tid = msgs[i].get("tool_call_id")
        if not isinstance(tid, str) or tid not in entries or tid in d.replaced:
            continue
        stub = stub_text(entries[tid])
        new = {**msgs[i], "content": stub}
        gain = work.count(msgs[i]) - work.count(new)
        if gain > 0:
            due.append((i, new, tid))
            saved += gain
    calls = 0
    for m in msgs[: old[-1] if old else 0]:
        ids = call_ids(m) if m.get("role") == "assistant" else []
        if ids and all(t in old_ids for t in ids) and not all(t in d.calls for t in ids):
            gain = _call_saving(m, entries, d.calls)
            if gain > 0:
                calls += 1
                saved += gain
    if len(due) + calls < batch and (batch_tokens is None or saved < batch_tokens):
        return frozenset()
    for i, new, _tid in due:
        msgs[i] = new
        work.new.add(id(new))
    replaced = {tid: new["content"] for _i, new, tid in due}
    work.decisions = d.model_copy(update={"replaced": {**d.replaced, **replaced}})
    compact_calls(work, entries, old_ids)
    return old_ids


def drop_tail_units(work: Work, budget: int) -> None:
    """Last resort: drop units other than system messages and the last user message, oldest first."""
    while work.tokens() > budget:
        msgs = work.messages
        floor, user = system_prefix(msgs), last_user(msgs)
        victim: Unit | None = next(
            (u for u in units(msgs) if u.start >= floor and not (user is not None and u.start <= user < u.end)),
            None,
        )
        if victim is None:
            return
        drop_range(work, victim.start, victim.end)
