"""``compact``: what the API's ``POST /v1/sessions/{session}/compact`` calls. Pure: no I/O, no clock.

Input: the agent's chat array, the model's context window in tokens, and a :class:`CompactContext` the caller
loaded (persisted decisions, offload entries by tool_call_id, the active canvas and earlier canvases). Output: a
:class:`CompactResult` with the messages to send, every tool output that is not in them verbatim and where it
lives, the active canvas, and the decisions to persist for the next turn. See :mod:`.reclaim` for the ladder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from mnemoflow.errors import InvalidInput
from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.decisions import ReclaimDecisions
from mnemoflow.offload.injector import CanvasText, active_message, history_messages, inject
from mnemoflow.offload.messages import Message, fingerprint, last_user, system_prefix, validate
from mnemoflow.offload.reclaim import EntryInfo, Level, Work, drop_head, drop_tail_units, fold, mild, reapply
from mnemoflow.tokens import message_tokens


@dataclass(frozen=True, slots=True)
class Removed:
    """A tool output that is not verbatim in the compacted prompt, and where its raw bytes live."""

    tool_call_id: str
    how: Literal["summarized", "dropped"]
    ref: str | None
    node_id: str | None = None


@dataclass(frozen=True)
class CompactContext:
    """What the caller loads for one session before compacting. ``history`` is keyed by canvas prefix ``NNN``."""

    decisions: ReclaimDecisions = field(default_factory=ReclaimDecisions)
    entries: Mapping[str, EntryInfo] = field(default_factory=dict)
    active: CanvasText | None = None
    history: Mapping[str, CanvasText] = field(default_factory=dict)
    task_start: str | None = None
    """Fingerprint of the user message that started the current long task (from the latest boundary)."""
    config: OffloadConfig = field(default_factory=OffloadConfig)


@dataclass(frozen=True)
class CompactResult:
    messages: list[Message]
    removed: list[Removed]
    canvas: CanvasText | None
    decisions: ReclaimDecisions
    level: Level
    tokens_before: int
    tokens_after: int


def _history(deleted: list[str], ctx: CompactContext) -> list[CanvasText]:
    """Canvases of dropped tool calls other than the active one, newest first."""
    prefixes: dict[str, None] = {}
    for tid in deleted:
        entry = ctx.entries.get(tid)
        if entry and entry.node_id and "-" in entry.node_id:
            prefixes[entry.node_id.split("-", 1)[0]] = None
    active = ctx.active.name if ctx.active else None
    found = [ctx.history[p] for p in prefixes if p in ctx.history and ctx.history[p].name != active]
    return sorted(found, key=lambda c: c.name, reverse=True)


def check_window(msgs: list[Message], window: int) -> None:
    """Raise InvalidInput unless ``window`` can hold the system messages and the last user message."""
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        raise InvalidInput(f"window must be a positive number of tokens, got {window!r}")
    floor, user = system_prefix(msgs), last_user(msgs)
    protected = sum(message_tokens(m) for m in msgs[:floor]) + (message_tokens(msgs[user]) if user is not None else 0)
    if protected > window:
        raise InvalidInput(
            f"window of {window} tokens is too small for the system messages and the last user message "
            f"({protected} tokens)"
        )


def compact(messages: list[Message], window: int, ctx: CompactContext) -> CompactResult:
    """Compact ``messages`` to fit ``window`` tokens; raise InvalidInput for a malformed array or tiny window."""
    msgs = validate(messages)
    check_window(msgs, window)
    cfg = ctx.config
    floor = system_prefix(msgs)
    tokens_before = sum(message_tokens(m) for m in msgs)
    work = Work(list(msgs), ctx.decisions)
    had_cut = ctx.decisions.cut is not None
    reapply(work)
    cut_now = cfg.fold_finished_tasks and ctx.task_start is not None and fold(work, ctx.task_start)
    if cut_now:
        work.raise_level("mild")
    active = active_message(ctx.active) if ctx.active else None
    if active and cfg.inject_active == "after_reclaim" and not (ctx.decisions.deleted or ctx.decisions.replaced):
        active = None  # nothing left the prompt yet: the canvas would only repeat it
    work.extra_tokens = message_tokens(active) if active else 0

    if work.tokens() >= int(cfg.aggressive_ratio * window):
        work.raise_level("aggressive")
        cut_now = drop_head(work, int(cfg.aggressive_target_ratio * window)) or cut_now
    if work.tokens() >= int(cfg.mild_ratio * window):
        work.raise_level("mild")
        mild(work, window, ctx.entries, cfg, scan_all=False)
    all_deleted = list(dict.fromkeys([*ctx.decisions.deleted, *work.deleted]))
    history: list[Message] = []
    if all_deleted:
        room = min(int(cfg.history_canvas_ratio * window), int(cfg.aggressive_ratio * window) - work.tokens())
        history = history_messages(_history(all_deleted, ctx), max(room, 0))
        work.extra_tokens += sum(message_tokens(m) for m in history)
    if work.tokens() >= int(cfg.emergency_ratio * window) or work.tokens() > window:
        work.raise_level("emergency")
        target = int(cfg.emergency_target_ratio * window)
        cut_now = drop_head(work, target) or cut_now
        if work.tokens() > target:
            mild(work, target, ctx.entries, cfg.model_copy(update={"mild_ratio": 1.0}), scan_all=True)
        if work.tokens() > window and history:
            work.extra_tokens -= sum(message_tokens(m) for m in history)
            history = []
        if work.tokens() > window and active:
            work.extra_tokens -= message_tokens(active)
            active = None
        drop_tail_units(work, window)
    if active is None and ctx.active and (work.deleted or work.decisions.replaced) and work.level != "emergency":
        candidate = active_message(ctx.active)
        if work.tokens() + message_tokens(candidate) <= int(cfg.aggressive_ratio * window):
            active = candidate

    out = inject(work.messages, active, history, cfg.injector_tail)
    decisions = work.decisions.model_copy(
        update={"deleted": tuple(dict.fromkeys([*ctx.decisions.deleted, *work.deleted]))}
    )
    if cut_now or had_cut:
        kept = work.messages[floor:]
        decisions = decisions.model_copy(update={"cut": fingerprint(kept[0]) if kept else ctx.decisions.cut})
    return CompactResult(
        messages=out,
        removed=_removed(msgs, out, ctx.entries),
        canvas=ctx.active if active else None,
        decisions=decisions,
        level=work.level,
        tokens_before=tokens_before,
        tokens_after=sum(message_tokens(m) for m in out),
    )


def _removed(before: list[Message], after: list[Message], entries: Mapping[str, EntryInfo]) -> list[Removed]:
    kept = {m["tool_call_id"]: m.get("content") for m in after if m.get("role") == "tool"}
    out = []
    for m in before:
        if m.get("role") != "tool":
            continue
        tid = m["tool_call_id"]
        if tid in kept and kept[tid] == m.get("content"):
            continue
        entry = entries.get(tid)
        how: Literal["summarized", "dropped"] = "summarized" if tid in kept else "dropped"
        out.append(Removed(tid, how, entry.ref if entry else None, entry.node_id if entry else None))
    return out
