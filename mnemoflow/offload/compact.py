"""``compact``: what the API's ``POST /v1/sessions/{session}/compact`` calls. Pure: no I/O, no clock.

Input: the agent's chat array, the model's context window in tokens, and a :class:`CompactContext` the caller
loaded (persisted decisions, offload entries by tool_call_id, the active canvas and earlier canvases). Output: a
:class:`CompactResult` with the messages to send, every tool output that is not in them verbatim and where it
lives, the active canvas, and the decisions to persist for the next turn. See :mod:`.reclaim` for the ladder.

Canvases (``freeze_injection``): the injected canvas messages are persisted verbatim with their position and
re-sent byte-identical until a reclaim rewrites the prompt; only then are they refreshed, placed by docs/tdam-spec.md
§5.6 but not before the rewritten region, so the calls in between only append to an unchanged prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from mnemoflow.errors import InvalidInput
from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.decisions import ReclaimDecisions
from mnemoflow.offload.injector import CanvasText, active_message, history_messages, insertion_point
from mnemoflow.offload.messages import Message, fingerprint, last_user, system_prefix, units, validate
from mnemoflow.offload.reclaim import (
    EntryInfo,
    Level,
    Work,
    compact_calls,
    drop_head,
    drop_tail_units,
    fold,
    mild,
    reapply,
    stub_by_age,
)
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


def _frozen(msgs: list[Message], ctx: CompactContext) -> list[Message] | None:
    """The canvases injected last call, if they can be re-sent unchanged at the same place."""
    d = ctx.decisions
    if not ctx.config.freeze_injection or not d.injected or d.inject_at is None:
        return None
    if d.injected_canvas != (ctx.active.name if ctx.active else None):
        return None  # the active task changed: its canvas must change too
    at = d.inject_at
    if not 0 < at <= len(msgs) or fingerprint(msgs[at - 1]) != d.inject_after:
        return None
    if at < len(msgs) and msgs[at].get("role") == "tool":
        return None
    return [{"role": "user", "content": text} for text in d.injected]


def _place(msgs: list[Message], work: Work, tail: int, freeze: bool) -> int:
    """Where fresh canvases go: docs/tdam-spec.md §5.6, but not before the region this call rewrote (whose cache is lost
    anyway), so the next calls append after an unchanged prefix."""
    idx = insertion_point(msgs, tail)
    if not freeze:
        return idx
    end = work.change_end()
    if end <= idx:
        return idx
    for unit in units(msgs):
        if unit.start >= end:
            return max(unit.start, system_prefix(msgs))
    return idx  # the rewrite reached the last unit: keep the spec position


def _active_budget(cfg: OffloadConfig, window: int) -> int | None:
    return None if cfg.active_canvas_ratio is None else int(cfg.active_canvas_ratio * window)


def compact(messages: list[Message], window: int, ctx: CompactContext) -> CompactResult:
    """Compact ``messages`` to fit ``window`` tokens; raise InvalidInput for a malformed array or tiny window."""
    msgs = validate(messages)
    check_window(msgs, window)
    cfg = ctx.config
    floor = system_prefix(msgs)
    work = Work(list(msgs), ctx.decisions)
    tokens_before = sum(work.count(m) for m in msgs)
    had_cut = ctx.decisions.cut is not None
    reapply(work)
    cut_now = cfg.fold_finished_tasks and ctx.task_start is not None and fold(work, ctx.task_start)
    if cut_now:
        work.raise_level("mild")
    aged: frozenset[str] = frozenset()
    if cfg.stub_keep_recent is not None:
        aged = stub_by_age(work, ctx.entries, cfg.stub_keep_recent, cfg.stub_batch, cfg.stub_batch_tokens)
        if aged:
            work.raise_level("mild")
    frozen = None if work.changed else _frozen(work.messages, ctx)
    active = active_message(ctx.active, _active_budget(cfg, window)) if ctx.active else None
    if active and cfg.inject_active == "after_reclaim" and not (ctx.decisions.deleted or ctx.decisions.replaced):
        active = None  # nothing left the prompt yet: the canvas would only repeat it
    extra = frozen if frozen is not None else [active] if active else []
    work.extra_tokens = sum(message_tokens(m) for m in extra)

    if work.tokens() >= int(cfg.aggressive_ratio * window):
        work.raise_level("aggressive")
        cut_now = drop_head(work, int(cfg.aggressive_target_ratio * window)) or cut_now
    if work.tokens() >= int(cfg.mild_ratio * window):
        work.raise_level("mild")
        mild(work, window, ctx.entries, cfg, scan_all=False)
    if cfg.compact_stubbed_calls:
        compact_calls(work, ctx.entries, aged)
    if frozen is not None and (work.changed or work.tokens() >= int(cfg.emergency_ratio * window)):
        frozen = None  # reclaim rewrote the prompt: refresh the canvases after the rewritten region
        work.extra_tokens = message_tokens(active) if active else 0
    history: list[Message] = []
    if frozen is None:
        all_deleted = list(dict.fromkeys([*ctx.decisions.deleted, *work.deleted]))
        if all_deleted:
            room = min(int(cfg.history_canvas_ratio * window), int(cfg.aggressive_ratio * window) - work.tokens())
            history = history_messages(_history(all_deleted, ctx), max(room, 0), cfg.history_canvas_full)
            work.extra_tokens += sum(message_tokens(m) for m in history)
    if work.tokens() >= int(cfg.emergency_ratio * window) or work.tokens() > window:
        work.raise_level("emergency")
        target = int(cfg.emergency_target_ratio * window)
        cut_now = drop_head(work, target) or cut_now
        if work.tokens() > target:
            mild(work, target, ctx.entries, cfg.model_copy(update={"mild_ratio": 1.0}), scan_all=True)
            if cfg.compact_stubbed_calls:
                compact_calls(work, ctx.entries)
        if work.tokens() > window and history:
            work.extra_tokens -= sum(message_tokens(m) for m in history)
            history = []
        if work.tokens() > window and active:
            work.extra_tokens -= message_tokens(active)
            active = None
        drop_tail_units(work, window)
    if frozen is None and active is None and ctx.active and (work.deleted or work.decisions.replaced):
        if work.level != "emergency":
            candidate = active_message(ctx.active, _active_budget(cfg, window))
            if work.tokens() + message_tokens(candidate) <= int(cfg.aggressive_ratio * window):
                active = candidate

    if frozen is not None:
        at = ctx.decisions.inject_at or 0
        out = [*work.messages[:at], *frozen, *work.messages[at:]]
        injected, canvas_name = [m["content"] for m in frozen], ctx.decisions.injected_canvas
    else:
        extra = [*history, *([active] if active else [])]
        at = _place(work.messages, work, cfg.injector_tail, cfg.freeze_injection) if extra else 0
        out = [*work.messages[:at], *extra, *work.messages[at:]]
        injected, canvas_name = [m["content"] for m in extra], (ctx.active.name if active and ctx.active else None)
    decisions = work.decisions.model_copy(
        update={
            "deleted": tuple(dict.fromkeys([*ctx.decisions.deleted, *work.deleted])),
            "injected": tuple(injected),
            "inject_at": at if injected else None,
            "inject_after": fingerprint(work.messages[at - 1]) if injected and at > 0 else None,
            "injected_canvas": canvas_name,
        }
    )
    if cut_now or had_cut:
        kept = work.messages[floor:]
        decisions = decisions.model_copy(update={"cut": fingerprint(kept[0]) if kept else ctx.decisions.cut})
    return CompactResult(
        messages=out,
        removed=_removed(msgs, out, ctx.entries),
        canvas=(ctx.active if canvas_name and ctx.active and canvas_name == ctx.active.name else None),
        decisions=decisions,
        level=work.level,
        tokens_before=tokens_before,
        tokens_after=sum(work.count(m) for m in out),
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
