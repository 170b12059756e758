"""Per-session state that a session actor owns, persisted in ``state.json`` so a shard can restart or move.

The state follows the session's offload log by ``seq``: :func:`advance` applies entries it has not seen, in
order, and refuses a gap (the caller then reads the missing entries from the log). It is the seed that the
offload issue grows with boundaries, decisions and fingerprints: ``boundaries`` (L1.5, by entry seq),
``active_canvas`` and ``canvas_counter`` (canvas files), ``canvas_seq`` (last entry folded into a canvas),
``canvas_fingerprints`` (skip unchanged rewrites), ``last_user_fingerprint`` (judge each user turn once),
``reclaim`` (compaction decisions re-applied every turn), and the cursors of the model's background work
(:mod:`mnemoflow.offload.refine`): ``model_summary_seq``, ``model_canvas_seq`` and ``pending_turn``. All have
defaults, so older state files still load.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from mnemoflow.errors import MnemoflowError
from mnemoflow.ids import SafeId
from mnemoflow.offload.decisions import Boundary, ReclaimDecisions
from mnemoflow.offload.entries import OffloadEntry
from mnemoflow.ports import FileStore
from mnemoflow.storage import Layout


class SequenceGap(MnemoflowError):
    """Entries arrived with a hole before them; read the log from ``expected`` on and apply again."""

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"expected offload entry seq {expected}, got {got}")
        self.expected = expected


class PendingTurn(BaseModel):
    """A user message the request path judged with the heuristic, kept for the model to judge in the background:
    what the judge's prompt needs, bounded (a restarted shard finds it here)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    fingerprint: str
    text: str = Field(max_length=8000)
    history: tuple[str, ...] = Field((), max_length=6)
    active_before: str | None = None
    """The canvas that was active before the heuristic judged this message (what the model continues)."""


class SessionState(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    tenant: SafeId
    session: SafeId
    count: int = 0
    last_seq: int = -1
    last_entry: OffloadEntry | None = None
    updated: AwareDatetime | None = None
    boundaries: tuple[Boundary, ...] = ()
    active_canvas: str | None = None
    canvas_counter: int = 0
    canvas_seq: int = -1
    canvas_fingerprints: dict[str, str] = {}
    last_user_fingerprint: str | None = None
    reclaim: ReclaimDecisions = ReclaimDecisions()
    model_summary_seq: int = -1
    model_canvas_seq: int = -1
    pending_turn: PendingTurn | None = None


def advance(state: SessionState, entries: Iterable[OffloadEntry]) -> SessionState:
    """Apply entries with ``seq > state.last_seq`` in order; raise :class:`SequenceGap` on a hole."""
    count, last_seq, last = state.count, state.last_seq, state.last_entry
    for entry in entries:
        if entry.seq <= last_seq:
            continue
        if entry.seq != last_seq + 1:
            raise SequenceGap(last_seq + 1, entry.seq)
        count, last_seq, last = count + 1, entry.seq, entry
    if last is None or last_seq == state.last_seq:  # nothing new (a new entry always sets ``last``)
        return state
    return state.model_copy(update={"count": count, "last_seq": last_seq, "last_entry": last, "updated": last.ts})


def load_state(files: FileStore, tenant: str, session: str) -> SessionState:
    raw = files.read_bytes(Layout.session_state(tenant, session))
    if raw is None:
        return SessionState(tenant=tenant, session=session)
    return SessionState.model_validate_json(raw)


def save_state(files: FileStore, state: SessionState) -> None:
    save_states(files, [state])


def save_states(files: FileStore, states: Iterable[SessionState]) -> None:
    """Write several sessions' states at once, made durable together (one round of fsyncs, not one a session)."""
    files.write_atomic_many(
        {Layout.session_state(s.tenant, s.session): s.model_dump_json(indent=1).encode() for s in states}
    )
