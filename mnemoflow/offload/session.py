"""One compaction turn for one session with its I/O: the function the API (or a session actor) calls.

Order: validate (nothing is written for a malformed array) -> store tool results not yet offloaded (refs +
entries, idempotent by tool_call_id) -> summarise new entries -> judge the latest user message once (L1.5) ->
fold new entries into canvases (L2) -> :func:`~mnemoflow.offload.compact.compact` -> persist the decisions in
``state.json``. Every step writes its outputs back as it goes, so a restarted shard continues from the files
alone (the session shard summarises entries as they arrive, :func:`summarise_unscored`, so a turn mostly finds
them done); the session's log and annotations are read once per turn (again only after this call stored tool results
itself), and what the turn annotates is applied in memory instead of read back. A turn that changes nothing (the
same array sent again) writes nothing: every fsync is a few milliseconds of the agent's wait.

Every stage of a turn is the heuristic one, so a compaction never waits on a model (DESIGN §6). Where a model
runs a stage, the session shard has it replace the heuristic's summaries, judgement and canvas in the background
(:mod:`mnemoflow.offload.refine`); a turn uses whatever of that is ready.
"""

from __future__ import annotations

from datetime import datetime

from mnemoflow.events import ToolResultEvent
from mnemoflow.offload.annotations import (
    AnnotatedLog,
    Annotation,
    annotate,
    annotated_entries,
    append_annotations,
    merged,
)
from mnemoflow.offload.boundary import apply_judgement, heuristic_judge
from mnemoflow.offload.canvas import from_mermaid
from mnemoflow.offload.canvas_update import canvas_path, save_canvas, update_canvases
from mnemoflow.offload.compact import CompactContext, CompactResult, check_window, compact
from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.entries import OffloadEntry, OffloadWriter
from mnemoflow.offload.injector import CanvasText
from mnemoflow.offload.messages import Message, call_ids, fingerprint, last_user, validate
from mnemoflow.offload.reclaim import EntryInfo
from mnemoflow.offload.session_state import PendingTurn, SessionState, advance, load_state, save_state
from mnemoflow.offload.summarize import heuristic_summary, pair_of
from mnemoflow.ports import FileStore
from mnemoflow.ports.clock import Clock
from mnemoflow.storage import Layout


def tool_result_events(tenant: str, session: str, msgs: list[Message], now: datetime) -> list[ToolResultEvent]:
    """The tool results of ``msgs`` as events, each with its call's name and arguments: what the stream worker is
    given for them."""
    calls: dict[str, tuple[str, str]] = {}
    out = []
    for m in msgs:
        for c in m.get("tool_calls") or ():
            f = c.get("function") or {}
            calls[str(c.get("id"))] = (str(f.get("name", "")), str(f.get("arguments", "")))
        if m.get("role") == "tool":
            name, args = calls.get(m["tool_call_id"], ("", ""))
            content = m.get("content")
            text = content if isinstance(content, str) else "" if content is None else str(content)
            out.append(
                ToolResultEvent(
                    tenant=tenant,
                    session=session,
                    tool_call_id=m["tool_call_id"],
                    tool_name=name,
                    arguments=args,
                    content=text,
                    ts=now,
                )
            )
    return out


def _summarise(
    files: FileStore, state: SessionState, entries: list[OffloadEntry], cfg: OffloadConfig
) -> tuple[list[OffloadEntry], list[Annotation]]:
    """Summarise and score (heuristic) the entries that have no score yet; returns ``entries`` with them filled in
    (what reading the annotated log again would give) and the annotations to append. The caller appends them with
    the canvas's node annotations, in this order: one append, one fsync, the same lines."""
    notes = _summaries(files, state.tenant, state.session, entries, cfg)
    return (annotate(entries, merged(notes)), notes) if notes else (entries, [])


def summarise_unscored(
    files: FileStore, tenant: str, session: str, log: AnnotatedLog, config: OffloadConfig | None = None
) -> int:
    """Summarise and score (heuristic) the session's entries that have no score yet, and append the annotations;
    returns how many. ``log``: the session's annotated log as the caller keeps it (read from where it stopped).

    Why: summarising is the part of a turn that does not depend on the request's array, and the largest: a turn
    that caught up with the previous request's three tool results took 8-11 ms against 1 ms for the same array
    with nothing new, half of it this (20-message tau-bench airline arrays). The session shard runs it when new
    entries arrive, so it runs while the agent waits for its model, not while it waits for us."""
    notes = _summaries(files, tenant, session, log.read(files, tenant, session), config or OffloadConfig())
    append_annotations(files, tenant, session, notes)
    return len(notes)


def _summaries(
    files: FileStore, tenant: str, session: str, entries: list[OffloadEntry], cfg: OffloadConfig
) -> list[Annotation]:
    """The annotations of the heuristic's summary and score of the entries that have no score yet."""
    sums = [heuristic_summary(pair_of(files, tenant, session, e), cfg) for e in entries if e.score is None]
    return [Annotation(tool_call_id=s.tool_call_id, summary=s.summary, score=s.score, error=s.error) for s in sums]


def _judge(
    files: FileStore,
    state: SessionState,
    msgs: list[Message],
    entries: list[OffloadEntry],
    now: datetime,
    judge_later: bool,
) -> SessionState:
    """Judge a new user message with the heuristic (L1.5); with ``judge_later`` it is also kept as the session's
    pending turn, for the model to judge in the background (:mod:`mnemoflow.offload.refine`)."""
    u = last_user(msgs)
    if u is None:
        return state
    fp = fingerprint(msgs[u])
    if fp == state.last_user_fingerprint:
        return state
    text = str(msgs[u].get("content") or "")
    before = state.active_canvas
    judgement = heuristic_judge(text, before)
    after = {t for m in msgs[u:] for t in call_ids(m)}
    start = min((e.seq for e in entries if e.tool_call_id in after), default=None)
    state, canvas = apply_judgement(state, judgement, fp, now, start)
    if canvas is not None and state.active_canvas:
        state = save_canvas(files, state.tenant, state.session, state.active_canvas, canvas, state)
    if judge_later:
        history = [str(m.get("content") or "")[:2000] for m in msgs[:u] if m.get("role") in ("user", "assistant")]
        turn = PendingTurn(fingerprint=fp, text=text[:8000], history=tuple(history[-6:]), active_before=before)
        state = state.model_copy(update={"pending_turn": turn})
    return state


def _context(
    files: FileStore, state: SessionState, cfg: OffloadConfig, annotated: list[OffloadEntry]
) -> CompactContext:
    t, s = state.tenant, state.session
    entries = {e.tool_call_id: EntryInfo(e.tool_call_id, e.summary, e.score, e.ref, e.node_id) for e in annotated}
    history: dict[str, CanvasText] = {}
    active = None
    for name in files.list_dir(f"{Layout.session_dir(t, s)}/canvases"):
        raw = files.read_bytes(canvas_path(t, s, name))
        if raw is None:
            continue
        mermaid = raw.decode("utf-8")
        text = CanvasText(name, mermaid, from_mermaid(mermaid).task_goal)
        if name == state.active_canvas:
            active = text
        else:
            history[name[:3]] = text
    longs = [b for b in state.boundaries if b.decision == "new_long"]
    task_start = longs[-1].user_fingerprint if longs and state.active_canvas == longs[-1].canvas else None
    return CompactContext(state.reclaim, entries, active, history, task_start, cfg)


async def compact_session(
    files: FileStore,
    tenant: str,
    session: str,
    messages: list[Message],
    window: int,
    *,
    clock: Clock,
    writer: OffloadWriter | None = None,
    judge_later: bool = False,
    config: OffloadConfig | None = None,
) -> CompactResult:
    """Run one compaction turn for ``tenant/session`` and persist what it decided (see the module docstring).

    ``writer`` stores tool results of ``messages`` that are not offloaded yet (pass None when the stream worker
    already did). Every stage here is the heuristic one: no request waits on a model. Where a model runs a stage,
    it replaces the heuristic's output in the background (:mod:`mnemoflow.offload.refine`); ``judge_later`` keeps
    a new user message for its judge.
    """
    result, _ = await compact_turn(
        files, tenant, session, messages, window, clock=clock, writer=writer, judge_later=judge_later, config=config
    )
    return result


async def compact_turn(
    files: FileStore,
    tenant: str,
    session: str,
    messages: list[Message],
    window: int,
    *,
    clock: Clock,
    writer: OffloadWriter | None = None,
    judge_later: bool = False,
    config: OffloadConfig | None = None,
    state: SessionState | None = None,
    log: AnnotatedLog | None = None,
) -> tuple[CompactResult, SessionState]:
    """:func:`compact_session` for a caller that keeps the session in memory (the session shard): ``state`` is the
    session's state as ``state.json`` holds it (None: read it), ``log`` its annotated log as last read (None: read
    both files whole); returns the result and the state saved (equal to ``state`` when the turn changed nothing).

    Why: a turn read and parsed ``state.json`` and the whole log again although the shard held them, and the shard
    read ``state.json`` twice more around the call; that cost grew with the session and came before every request.
    """
    cfg = config or OffloadConfig()
    msgs = validate(messages)
    check_window(msgs, window)
    now = clock.now()
    state = loaded = state if state is not None else load_state(files, tenant, session)
    read = log.read if log is not None else annotated_entries
    u = last_user(msgs)
    split = len(msgs) if u is None else u
    answered_before = {t for m in msgs[:split] for t in call_ids(m)}
    events = tool_result_events(tenant, session, msgs, now)
    if writer is not None:
        writer.write([e for e in events if e.tool_call_id in answered_before])
    entries = read(files, tenant, session)
    state = advance(state, [e for e in entries if e.seq > state.last_seq])
    state = _judge(files, state, msgs, entries, now, judge_later)
    if writer is not None and (after := [e for e in events if e.tool_call_id not in answered_before]):
        writer.write(after)
        entries = read(files, tenant, session)
        state = advance(state, [e for e in entries if e.seq > state.last_seq])
    entries, summaries = _summarise(files, state, entries, cfg)
    state, nodes = await update_canvases(files, state, entries, now, None, cfg.canvas_batch, summaries)
    result = compact(msgs, window, _context(files, state, cfg, annotate(entries, merged(nodes))))
    final = state.model_copy(update={"reclaim": result.decisions})
    if final != loaded:  # the same array again changes nothing: no write, no fsync
        save_state(files, final)
        return result, final
    return result, loaded
