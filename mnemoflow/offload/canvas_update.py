"""The canvas update pipeline (L2): batches of entries -> proposed ops -> apply -> render -> re-parse -> save.

One canvas per long task, ``canvases/NNN-<label>.mmd``. Entries are routed to canvases by the persisted
boundaries; each batch (<= 30 entries) gets one proposal, from the LLM port (:mod:`mnemoflow.prompts.offload_canvas`)
or the deterministic heuristic (:mod:`mnemoflow.offload.canvas_heuristic`). Code applies the ops (all or nothing),
renders, re-parses the text and refuses to save a canvas that does not round-trip; a rendering whose fingerprint
equals the saved one is not rewritten. The node each tool call landed on is appended to the annotations, so
drill-down works node -> entries -> refs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import partial

from pydantic import ValidationError

from mnemoflow.errors import InvalidInput, MnemoflowError
from mnemoflow.llm.fallback import fell_back
from mnemoflow.offload.annotations import Annotation, append_annotations
from mnemoflow.offload.boundary import canvas_for_seq
from mnemoflow.offload.canvas import (
    AssignToolCalls,
    Canvas,
    CanvasEngine,
    CanvasOps,
    apply_ops,
    fingerprint,
    from_mermaid,
    to_mermaid,
)
from mnemoflow.offload.canvas_heuristic import heuristic_canvas, tombstone_failures
from mnemoflow.offload.entries import OffloadEntry
from mnemoflow.offload.session_state import SessionState
from mnemoflow.ports import FileStore
from mnemoflow.ports.llm import LLM
from mnemoflow.prompts import offload_canvas
from mnemoflow.storage import Layout


def canvas_path(tenant: str, session: str, name: str) -> str:
    return f"{Layout.session_dir(tenant, session)}/canvases/{name}"


def canvas_names(files: FileStore, tenant: str, session: str) -> list[str]:
    """The session's canvases, oldest first (``NNN-<label>.mmd``)."""
    return [n for n in files.list_dir(f"{Layout.session_dir(tenant, session)}/canvases") if n.endswith(".mmd")]


def load_canvas(files: FileStore, tenant: str, session: str, name: str) -> Canvas | None:
    raw = files.read_bytes(canvas_path(tenant, session, name))
    return from_mermaid(raw.decode("utf-8")) if raw is not None else None


def save_canvas(
    files: FileStore, tenant: str, session: str, name: str, canvas: Canvas, state: SessionState
) -> SessionState:
    """Render, re-parse (refuse what does not round-trip), skip if unchanged; returns state with the fingerprint."""
    text = to_mermaid(canvas)
    if from_mermaid(text) != canvas:
        raise InvalidInput(f"canvas {name} does not round-trip through its Mermaid rendering")
    fp = fingerprint(canvas)
    if state.canvas_fingerprints.get(name) == fp and files.exists(canvas_path(tenant, session, name)):
        return state
    files.write_atomic(canvas_path(tenant, session, name), text.encode("utf-8"))
    return state.model_copy(update={"canvas_fingerprints": {**state.canvas_fingerprints, name: fp}})


async def propose_ops(canvas: Canvas, name: str, batch: Sequence[OffloadEntry], llm: LLM) -> CanvasOps:
    """The model's operations for one batch; a failed call is marked in its entry's line so it can draw the
    tombstone itself."""
    triples = [
        (
            e.tool_call_id,
            f"{e.tool_name}({e.arguments[:150]})",
            f"FAILED {e.error} | {e.summary}" if e.error else e.summary,
        )
        for e in batch
    ]
    reply = await llm.complete(
        offload_canvas.build(to_mermaid(canvas), name, triples),
        offload_canvas.reply_model(canvas, len(batch)),
        max_tokens=2000,
        stage="offload_canvas",
    )
    return offload_canvas.to_ops(reply)


async def fold_canvases(
    state: SessionState,
    entries: Sequence[OffloadEntry],
    load: Callable[[str], Canvas | None],
    now: datetime,
    llm: LLM | None = None,
    batch_size: int = 30,
) -> tuple[dict[str, Canvas], list[Annotation]]:
    """Fold ``entries`` into the canvases the boundaries of ``state`` route them to, in memory: the canvases that
    changed (each started from ``load(name)``, or empty) and the node each folded tool call landed on.

    A proposal the canvas refuses (unknown node, broken invariant), a reply still invalid after the repair try and a
    model that does not answer all fall back to the heuristic ops for that batch,
    so entries are never left unmapped; unassigned tool calls of an LLM batch are attached to its last node, and a
    failed call the model left on a live node gets a tombstone of its own (the heuristic draws those itself).
    """
    notes: list[Annotation] = []
    by_canvas: dict[str, list[OffloadEntry]] = {}
    for e in entries:
        if (name := canvas_for_seq(state, e.seq)) is not None:
            by_canvas.setdefault(name, []).append(e)
    out: dict[str, Canvas] = {}
    for name, items in by_canvas.items():
        canvas = load(name)
        if canvas is None:
            prefix = name[:3] if name[:3].isdigit() else None
            canvas = Canvas(task_goal=name[4:-4] or "task", created=items[0].ts, updated=items[0].ts, prefix=prefix)
        for i in range(0, len(items), batch_size):
            batch = items[i : i + batch_size]
            engine: CanvasEngine = "heuristic"
            if llm is None:
                new = heuristic_canvas(canvas, batch, now)
            else:
                try:
                    new, engine = apply_ops(canvas, await propose_ops(canvas, name, batch, llm), now), "llm"
                except (MnemoflowError, ValidationError) as exc:  # invalid, refused, or no model answering
                    fell_back(llm, "offload_canvas", exc)
                    new = heuristic_canvas(canvas, batch, now)
            if engine not in new.drawn_by:
                new = new.model_copy(update={"drawn_by": tuple(sorted({*new.drawn_by, engine}))})
            missing = [e.tool_call_id for e in batch if new.node_for_tool_call(e.tool_call_id) is None]
            if missing and new.nodes:
                target = next((n.id for n in reversed(new.nodes) if n.status != "blocked"), None)
                if target:
                    new = apply_ops(new, [AssignToolCalls(id=target, tool_call_ids=tuple(missing))], now)
            if llm is not None and (tombstones := tombstone_failures(new, batch)):
                new = apply_ops(new, tombstones, now)
            canvas = new
            notes += [
                Annotation(tool_call_id=e.tool_call_id, node_id=n.id)
                for e in batch
                if (n := canvas.node_for_tool_call(e.tool_call_id)) is not None
            ]
        out[name] = canvas
    return out, notes


def save_folded(
    files: FileStore, state: SessionState, canvases: Mapping[str, Canvas], notes: Sequence[Annotation]
) -> SessionState:
    """Save folded canvases (see :func:`save_canvas`) and append their node annotations; returns the state with
    the new fingerprints."""
    append_annotations(files, state.tenant, state.session, notes)
    for name, canvas in canvases.items():
        state = save_canvas(files, state.tenant, state.session, name, canvas, state)
    return state


async def update_canvases(
    files: FileStore,
    state: SessionState,
    entries: Sequence[OffloadEntry],
    now: datetime,
    llm: LLM | None = None,
    batch_size: int = 30,
    notes_before: Sequence[Annotation] = (),
) -> tuple[SessionState, list[Annotation]]:
    """Fold entries with ``seq > state.canvas_seq`` into their canvases (:func:`fold_canvases`) and save them;
    returns the state to save and the node annotations it appended (the caller need not read them back).
    ``notes_before``: the caller's annotations to append before those, in the same append (one fsync, not two)."""
    todo = [e for e in entries if e.seq > state.canvas_seq]
    canvases, notes = await fold_canvases(
        state, todo, partial(load_canvas, files, state.tenant, state.session), now, llm, batch_size
    )
    state = save_folded(files, state, canvases, [*notes_before, *notes])
    if todo:
        state = state.model_copy(update={"canvas_seq": todo[-1].seq})
    return state, notes
