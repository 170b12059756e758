"""Summaries, scores and node ids of offload entries, in an append-only ``annotations.jsonl`` beside the log.

Why a sidecar: ``offload.jsonl`` is appended by the stream worker while the session actor summarises and maps
entries to canvas nodes. Rewriting the log from a second writer would race the first; appending annotation lines
(last line per tool_call_id wins) keeps one writer per file and survives a crash mid-write (torn tail dropped).
:func:`annotated_entries` gives the merged view (entries with summary, score and node_id filled).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.offload.entries import OffloadEntry, read_entries, read_ref
from mnemoflow.ports import FileStore
from mnemoflow.ports.files import Tail
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


@dataclass
class _Read:
    """How far a file was read: its id (device and inode) and the offset just after the last whole line."""

    file_id: str | None = None
    end: int = 0

    def tail(self, files: FileStore, path: str) -> tuple[list[str], bool]:
        """The whole lines appended since, and whether they are all of the file's (a first read, or the file was
        replaced, cut or removed since: then the caller starts over)."""
        start = self.end
        got: Tail | None = files.read_tail(path, start)
        if got is not None and start and (got.file_id != self.file_id or got.size < start):
            start, got = 0, files.read_tail(path, 0)
        if got is None:
            self.file_id, self.end = None, 0
            return [], True
        self.file_id, self.end = got.file_id, got.end
        return got.lines, start == 0


@dataclass
class AnnotatedLog:
    """One session's :func:`annotated_entries`, kept between calls so that each reads and parses only the lines
    appended since (the log and its annotations are append-only; a file replaced, as retention rewrites the log,
    or cut, as a torn tail is repaired, is read again whole).

    Why: a compaction turn read and parsed both files whole, and merged every annotation again, on every
    request of the session: a cost that grew with the session (a fifth of an agent step's CPU by step 30)."""

    _log: _Read = field(default_factory=_Read)
    _notes_read: _Read = field(default_factory=_Read)
    _raw: list[OffloadEntry] = field(default_factory=list)
    _notes: dict[str, dict[str, object]] = field(default_factory=dict)
    _annotated: list[OffloadEntry] = field(default_factory=list)

    def read(self, files: FileStore, tenant: str, session: str) -> list[OffloadEntry]:
        """What :func:`annotated_entries` returns for the session now (a new list: the caller may keep it)."""
        log_lines, log_reset = self._log.tail(files, Layout.offload(tenant, session))
        note_lines, notes_reset = self._notes_read.tail(files, annotations_path(tenant, session))
        new = [OffloadEntry.model_validate_json(line) for line in log_lines]
        notes = [Annotation.model_validate_json(line) for line in note_lines]
        if log_reset or notes_reset:
            self._raw = new if log_reset else [*self._raw, *new]
            self._notes = merged(notes) if notes_reset else _merge_into(self._notes, notes)
            self._annotated = annotate(self._raw, self._notes)
            return list(self._annotated)
        changed = {n.tool_call_id for n in notes}
        self._notes = _merge_into(self._notes, notes)
        if changed:
            self._annotated = [
                r.model_copy(update=dict(self._notes[r.tool_call_id])) if r.tool_call_id in changed else e
                for r, e in zip(self._raw, self._annotated, strict=True)
            ]
        self._raw = [*self._raw, *new]
        self._annotated = [*self._annotated, *annotate(new, self._notes)]
        return list(self._annotated)


def _merge_into(notes: dict[str, dict[str, object]], new: Iterable[Annotation]) -> dict[str, dict[str, object]]:
    """``notes`` with ``new`` merged in as :func:`merged` merges (the changed ids get new dicts; ``notes`` itself
    is left as it was)."""
    out = dict(notes)
    for note in new:
        fields = dict(out.get(note.tool_call_id, {}))
        fields.update(note.model_dump(exclude_none=True, exclude={"tool_call_id"}))
        out[note.tool_call_id] = fields
    return out


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
