"""Summaries, scores and node ids of offload entries, in an append-only ``annotations.jsonl`` beside the log.

Why a sidecar: ``offload.jsonl`` is appended by the stream worker while the session actor summarises and maps
entries to canvas nodes. Rewriting the log from a second writer would race the first; appending annotation lines
(last line per tool_call_id wins) keeps one writer per file and survives a crash mid-write (torn tail dropped).
:func:`annotated_entries` gives the merged view (entries with summary, score and node_id filled).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.offload.entries import OffloadEntry, read_entries, read_ref
from mnemoflow.ports import FileStore
from mnemoflow.storage import Layout


class Annotation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    tool_call_id: str
    summary: str | None = None
    score: int | None = Field(None, ge=0, le=10)
    error: str | None = None
    node_id: str | None = None


def annotations_path(tenant: str, session: str) -> str:
    return f"{Layout.session_dir(tenant, session)}/annotations.jsonl"


def append_annotations(files: FileStore, tenant: str, session: str, notes: Iterable[Annotation]) -> None:
    lines = [n.model_dump_json(exclude_none=True) for n in notes]
    if lines:
        files.append_lines(annotations_path(tenant, session), lines)


def merged(notes: Iterable[Annotation]) -> dict[str, dict[str, object]]:
    """tool_call_id -> the merged annotation fields (later notes override earlier ones field by field)."""
    out: dict[str, dict[str, object]] = {}
    for note in notes:
        out.setdefault(note.tool_call_id, {}).update(note.model_dump(exclude_none=True, exclude={"tool_call_id"}))
    return out


def read_annotations(files: FileStore, tenant: str, session: str) -> dict[str, dict[str, object]]:
    """The session's annotations, merged (see :func:`merged`)."""
    return merged(Annotation.model_validate_json(line) for line in files.read_lines(annotations_path(tenant, session)))


def annotate(entries: Iterable[OffloadEntry], notes: Mapping[str, Mapping[str, object]]) -> list[OffloadEntry]:
    """Entries with the fields of their merged annotations filled in."""
    return [e.model_copy(update=dict(notes[e.tool_call_id])) if e.tool_call_id in notes else e for e in entries]


def annotated_entries(files: FileStore, tenant: str, session: str, after_seq: int = -1) -> list[OffloadEntry]:
    """The session's entries with summary, score and node_id from the annotations."""
    return annotate(read_entries(files, tenant, session, after_seq), read_annotations(files, tenant, session))


def drill_down(files: FileStore, tenant: str, session: str, node_id: str) -> list[tuple[OffloadEntry, bytes | None]]:
    """node_id -> its entries -> their raw refs, byte-exact (None for a ref that was never stored).

    A node of the current canvas resolves through the merged annotations; a node id that was superseded (the model
    redrew a canvas the heuristic drew first, :mod:`mnemoflow.offload.refine`) resolves through the annotation
    history, so an id once shown to an agent never stops drilling down."""
    notes = [Annotation.model_validate_json(line) for line in files.read_lines(annotations_path(tenant, session))]
    entries = annotate(read_entries(files, tenant, session), merged(notes))
    hits = [e for e in entries if e.node_id == node_id]
    if not hits:
        ids = {n.tool_call_id for n in notes if n.node_id == node_id}
        hits = [e for e in entries if e.tool_call_id in ids]
    return [(e, read_ref(files, tenant, session, e.tool_call_id)) for e in hits]
