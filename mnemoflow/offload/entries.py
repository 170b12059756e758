"""Offload entries: per tool call, the raw output in ``refs/<tool_call_id>.md`` and one line in ``offload.jsonl``.

The ref is written first (atomically, byte-exact), then the entry, so an entry never points at a missing ref.
Entries carry ``seq``, their 0-based position in the session's log: the session actors follow the log by it.
Writes are idempotent by tool_call_id; see :class:`mnemoflow.memory.l0.L0Writer` for the cache rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from mnemoflow.events import ToolResultEvent
from mnemoflow.ids import SafeId
from mnemoflow.lru import LRU
from mnemoflow.ports import FileStore
from mnemoflow.storage import Layout
from mnemoflow.tokens import estimate_tokens


class OffloadEntry(BaseModel):
    """One line of ``offload.jsonl``. ``summary``, ``score``, ``error`` and ``node_id`` are filled by later stages."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    seq: int = Field(ge=0)
    tool_call_id: SafeId
    tool_name: str
    arguments: str
    summary: str = ""
    score: int | None = Field(None, ge=0, le=10, description="Replaceability 0-10; None until summarised.")
    error: str | None = Field(None, description="Why the call failed (exit code, error line); None: it did not.")
    node_id: str | None = None
    ref: str
    result_bytes: int = Field(ge=0)
    result_tokens: int = Field(ge=0)
    ts: AwareDatetime


@dataclass
class _SessionLog:
    ids: set[str] = field(default_factory=set)
    next_seq: int = 0


@dataclass(frozen=True)
class SessionAppend:
    """What one write did to one session: the entries it added and the log's last seq afterwards."""

    tenant: str
    session: str
    new_entries: list[OffloadEntry]
    last_seq: int


class OffloadWriter:
    def __init__(self, files: FileStore, cache_sessions: int = 4096) -> None:
        self._files = files
        self._logs: LRU[tuple[str, str], _SessionLog] = LRU(cache_sessions)

    def _load(self, key: tuple[str, str]) -> _SessionLog:
        path = Layout.offload(*key)
        self._files.repair_tail(path)
        log = _SessionLog()
        for entry in read_entries(self._files, *key):
            log.ids.add(entry.tool_call_id)
            log.next_seq = entry.seq + 1
        return log

    def write(self, events: Iterable[ToolResultEvent]) -> list[SessionAppend]:
        """Store the tool results not yet offloaded, in order; one :class:`SessionAppend` per session touched.

        Every ref of the batch is written (and durable) before any entry is appended, so an entry never points
        at a missing ref, and the refs of many sessions share one round of fsyncs."""
        grouped: dict[tuple[str, str], list[ToolResultEvent]] = {}
        for event in events:
            grouped.setdefault((event.tenant, event.session), []).append(event)
        try:
            planned = [(key, self._plan(key, session_events)) for key, session_events in grouped.items()]
            refs = {
                Layout.ref(*key, event.tool_call_id): event.content.encode()
                for key, (_log, new) in planned
                for event, _entry in new
            }
            self._files.write_atomic_many(refs)
            out = []
            for key, (log, new) in planned:
                self._files.append_lines(Layout.offload(*key), [entry.model_dump_json() for _, entry in new])
                log.next_seq += len(new)
                out.append(SessionAppend(key[0], key[1], [entry for _, entry in new], log.next_seq - 1))
        except Exception:
            for key in grouped:  # state unknown after a failed write: reload from the files on the retry
                self._logs.pop(key)
            raise
        return out

    def _plan(
        self, key: tuple[str, str], events: list[ToolResultEvent]
    ) -> tuple[_SessionLog, list[tuple[ToolResultEvent, OffloadEntry]]]:
        """The session's log and the entries its new events get (ids of a batch are deduplicated too)."""
        log = self._logs.get_or_load(key, self._load)
        new: list[tuple[ToolResultEvent, OffloadEntry]] = []
        for event in events:
            if event.tool_call_id in log.ids:
                continue
            entry = OffloadEntry(
                seq=log.next_seq + len(new),
                tool_call_id=event.tool_call_id,
                tool_name=event.tool_name,
                arguments=event.arguments,
                ref=Layout.ref_name(event.tool_call_id),
                result_bytes=len(event.content.encode()),
                result_tokens=estimate_tokens(event.content),
                ts=event.ts,
            )
            new.append((event, entry))
            log.ids.add(event.tool_call_id)
        return log, new

    def forget(self) -> None:
        self._logs.clear()


def read_entries(files: FileStore, tenant: str, session: str, after_seq: int = -1) -> list[OffloadEntry]:
    """Entries of a session's log with ``seq > after_seq``, in order."""
    entries = (OffloadEntry.model_validate_json(line) for line in files.read_lines(Layout.offload(tenant, session)))
    return [e for e in entries if e.seq > after_seq]


def read_ref(files: FileStore, tenant: str, session: str, tool_call_id: str) -> bytes | None:
    """The raw tool output, byte-exact, or None if it was never stored."""
    return files.read_bytes(Layout.ref(tenant, session, tool_call_id))
