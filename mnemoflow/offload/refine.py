"""The model's offload work, off the agent's path: judgements, summaries and canvases refined in the background.

A compaction (:mod:`mnemoflow.offload.session`) runs every stage with the heuristic, so no request waits on a
model. Where a model runs a stage, the session shard calls :func:`refine_session` after the turn, and the model's
output replaces the heuristic's once it is ready:

- **boundary**: the model judges the user message the heuristic judged (kept as ``state.pending_turn``). Its
  decision stands if the session has not moved on: when the turn is still the latest and no entry has been
  folded under the heuristic's decision yet; otherwise the heuristic's stays (counted *late*).
- **summaries**: entries after ``state.model_summary_seq`` are summarised by the model (the newest
  ``refine_max_entries``; older ones keep the heuristic's, counted *skipped*), appended as annotations (the last
  line per tool call wins).
- **canvas**: entries the heuristic has folded after ``state.model_canvas_seq`` are folded again by the model,
  starting from its own checkpoint of each canvas (``model-canvases/``); the live canvas becomes the model's
  fold plus the heuristic's fold of what arrived meanwhile. Superseded node ids stay resolvable (drill-down reads
  the annotation history).

Model calls run outside the session's lock; each result is applied under it (``locked``) against the state as it
is then, so a compaction that ran meanwhile is never overwritten. Everything is persisted (cursors and pending turn
in ``state.json``), so a restarted shard resumes where it stopped. A reply still invalid after the repair try
falls back to the heuristic for that item (:func:`~mnemoflow.llm.fallback.fell_back` counts it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Literal

from mnemoflow.config import ModelStage
from mnemoflow.errors import MnemoflowError
from mnemoflow.llm.fallback import fell_back
from mnemoflow.offload.annotations import Annotation, annotated_entries, append_annotations
from mnemoflow.offload.boundary import Judgement, apply_judgement, canvas_for_seq, llm_judge
from mnemoflow.offload.canvas import Canvas, from_mermaid, to_mermaid
from mnemoflow.offload.canvas_update import canvas_path, fold_canvases, load_canvas, save_canvas, save_folded
from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.entries import OffloadEntry
from mnemoflow.offload.session_state import PendingTurn, SessionState, load_state, save_state
from mnemoflow.offload.summarize import llm_summaries, pair_of
from mnemoflow.ports import FileStore
from mnemoflow.ports.clock import Clock
from mnemoflow.ports.llm import LLM
from mnemoflow.storage import Layout

Outcome = Literal["applied", "late", "skipped", "fallback"]
Locked = Callable[[], AbstractAsyncContextManager[object]]


@dataclass
class RefineReport:
    """What one pass did: items per ``(stage, outcome)``; *applied* (the model's output stands), *late* (the
    session moved on first: the heuristic's stays), *skipped* (too far behind: the heuristic's stays), *fallback*
    (the model failed: heuristic)."""

    counts: Counter[tuple[str, Outcome]] = field(default_factory=Counter)

    def add(self, stage: str, outcome: Outcome, n: int = 1) -> None:
        if n:
            self.counts[(stage, outcome)] += n


def refine_due(state: SessionState, stages: Collection[ModelStage]) -> bool:
    """Whether the model has anything to refine in this session."""
    return (
        ("boundary" in stages and state.pending_turn is not None)
        or ("summaries" in stages and state.last_seq > state.model_summary_seq)
        or ("canvas" in stages and state.canvas_seq > state.model_canvas_seq)
    )


def model_canvas_path(tenant: str, session: str, name: str) -> str:
    """The model's own fold of a canvas up to ``model_canvas_seq``: where its next fold starts."""
    return f"{Layout.session_dir(tenant, session)}/model-canvases/{name}"


async def refine_session(
    files: FileStore,
    tenant: str,
    session: str,
    llm: LLM,
    stages: Collection[ModelStage],
    *,
    clock: Clock,
    locked: Locked,
    config: OffloadConfig | None = None,
) -> RefineReport:
    """One background pass over ``tenant/session``: boundary, then summaries, then canvas (the canvas prompt reads
    the summaries). See the module docstring."""
    cfg = config or OffloadConfig()
    report = RefineReport()
    if "boundary" in stages:
        await _refine_boundary(files, tenant, session, llm, clock, locked, report)
    if "summaries" in stages:
        await _refine_summaries(files, tenant, session, llm, cfg, locked, report)
    if "canvas" in stages:
        await _refine_canvas(files, tenant, session, llm, clock, cfg, locked, report)
    return report


async def _refine_boundary(
    files: FileStore, tenant: str, session: str, llm: LLM, clock: Clock, locked: Locked, report: RefineReport
) -> None:
    turn = load_state(files, tenant, session).pending_turn
    if turn is None:
        return
    active = load_canvas(files, tenant, session, turn.active_before) if turn.active_before else None
    judgement: Judgement | None
    try:
        judgement = await llm_judge(turn.text, list(turn.history), None if active is None else active.task_goal, llm)
    except MnemoflowError as exc:  # invalid twice, or no model answering: the heuristic's judgement stays
        fell_back(llm, "offload_boundary", exc)
        judgement = None
    async with locked():
        state = load_state(files, tenant, session)
        if state.pending_turn != turn:  # a newer user message replaced it: that one is judged next
            report.add("boundary", "late")
            return
        state = state.model_copy(update={"pending_turn": None})
        if judgement is None:
            report.add("boundary", "fallback")
        else:
            state, outcome = settle_judgement(files, state, turn, judgement, clock)
            report.add("boundary", outcome)
        save_state(files, state)


def settle_judgement(
    files: FileStore, state: SessionState, turn: PendingTurn, judgement: Judgement, clock: Clock
) -> tuple[SessionState, Outcome]:
    """Put the model's judgement of ``turn`` in place of the heuristic's, if nothing was built on the heuristic's
    yet: the turn's boundary is the latest and no entry from its start on has been folded into a canvas."""
    latest = max(state.boundaries, key=lambda b: b.start_seq, default=None)
    if latest is None or latest.user_fingerprint != turn.fingerprint:
        return state, "late"
    if judgement.decision == latest.decision:
        marked = latest.model_copy(update={"source": judgement.source})
        return state.model_copy(update={"boundaries": (*(b for b in state.boundaries if b != latest), marked)}), (
            "applied"
        )
    if state.canvas_seq >= latest.start_seq:
        return state, "late"
    counter, prints = state.canvas_counter, dict(state.canvas_fingerprints)
    if latest.decision == "new_long" and latest.canvas:  # the heuristic's canvas is still empty: it goes
        files.remove(canvas_path(state.tenant, state.session, latest.canvas))
        prints.pop(latest.canvas, None)
        if latest.canvas[:3] == f"{counter:03d}":
            counter -= 1  # its number is free again
    undone = state.model_copy(
        update={
            "boundaries": tuple(b for b in state.boundaries if b != latest),
            "active_canvas": turn.active_before,
            "canvas_counter": counter,
            "canvas_fingerprints": prints,
        }
    )
    new, canvas = apply_judgement(undone, judgement, turn.fingerprint, clock.now(), latest.start_seq)
    if canvas is not None and new.active_canvas:
        new = save_canvas(files, new.tenant, new.session, new.active_canvas, canvas, new)
    return new, "applied"


async def _refine_summaries(
    files: FileStore, tenant: str, session: str, llm: LLM, cfg: OffloadConfig, locked: Locked, report: RefineReport
) -> None:
    state = load_state(files, tenant, session)
    behind = annotated_entries(files, tenant, session, after_seq=state.model_summary_seq)
    if not behind:
        return
    todo = behind[-cfg.refine_max_entries :]
    report.add("summaries", "skipped", len(behind) - len(todo))
    active = load_canvas(files, tenant, session, state.active_canvas) if state.active_canvas else None
    pairs = [pair_of(files, tenant, session, e) for e in todo]
    sums = await llm_summaries(pairs, llm, cfg, "" if active is None else active.task_goal)
    now_by_id = {e.tool_call_id: e for e in todo}
    notes = [
        Annotation(tool_call_id=s.tool_call_id, summary=s.summary, score=s.score, error=s.error)
        for s in sums
        if (e := now_by_id[s.tool_call_id]).summary != s.summary or e.score != s.score or e.error != s.error
    ]
    async with locked():
        current = load_state(files, tenant, session)
        if current.model_summary_seq != state.model_summary_seq:
            report.add("summaries", "late", len(todo))
            return
        append_annotations(files, tenant, session, notes)
        save_state(files, current.model_copy(update={"model_summary_seq": todo[-1].seq}))
    report.add("summaries", "applied", len(todo))


def _checkpoint(files: FileStore, tenant: str, session: str, name: str) -> Canvas | None:
    """Where the model's fold of ``name`` starts: its checkpoint, else the live canvas without the heuristic's
    nodes (its goal and prefix kept), else nothing (the fold starts an empty canvas)."""
    raw = files.read_bytes(model_canvas_path(tenant, session, name))
    if raw is not None:
        return from_mermaid(raw.decode("utf-8"))
    live = load_canvas(files, tenant, session, name)
    return None if live is None else live.model_copy(update={"nodes": (), "edges": (), "drawn_by": ()})


def _routes(state: SessionState, entries: Sequence[OffloadEntry]) -> list[str | None]:
    return [canvas_for_seq(state, e.seq) for e in entries]


async def _refine_canvas(
    files: FileStore,
    tenant: str,
    session: str,
    llm: LLM,
    clock: Clock,
    cfg: OffloadConfig,
    locked: Locked,
    report: RefineReport,
) -> None:
    state = load_state(files, tenant, session)
    todo = [
        e
        for e in annotated_entries(files, tenant, session, after_seq=state.model_canvas_seq)
        if e.seq <= state.canvas_seq
    ]
    if not todo:
        return
    if len(todo) > cfg.refine_max_entries:  # too far behind: the model continues from the heuristic's canvases
        async with locked():
            current = load_state(files, tenant, session)
            for name in {n for n in _routes(current, todo) if n is not None}:
                if (raw := files.read_bytes(canvas_path(tenant, session, name))) is not None:
                    files.write_atomic(model_canvas_path(tenant, session, name), raw)
            save_state(files, current.model_copy(update={"model_canvas_seq": current.canvas_seq}))
        report.add("canvas", "skipped", len(todo))
        return
    folded, notes = await fold_canvases(
        state, todo, lambda n: _checkpoint(files, tenant, session, n), clock.now(), llm, cfg.canvas_batch
    )
    async with locked():
        current = load_state(files, tenant, session)
        if current.model_canvas_seq != state.model_canvas_seq or _routes(current, todo) != _routes(state, todo):
            report.add("canvas", "late", len(todo))  # a judgement moved the entries meanwhile: next pass redoes them
            return
        for name, canvas in folded.items():
            files.write_atomic(model_canvas_path(tenant, session, name), to_mermaid(canvas).encode("utf-8"))
        upto = todo[-1].seq
        tail = [
            e
            for e in annotated_entries(files, tenant, session, after_seq=upto)
            if e.seq <= current.canvas_seq and canvas_for_seq(current, e.seq) in folded
        ]
        live, tail_notes = await fold_canvases(current, tail, folded.get, clock.now())
        current = save_folded(files, current, {**folded, **live}, [*notes, *tail_notes])
        save_state(files, current.model_copy(update={"model_canvas_seq": upto}))
    report.add("canvas", "applied", len(todo))
