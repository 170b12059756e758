"""The L1 history: append-only JSONL per user and day, with supersession marked by its own lines.

Why marker lines instead of rewriting old lines: appends are atomic per batch (FileStore contract) and a crash
leaves at most a torn tail, which is repaired; rewriting a day file would race with the append of the same day.
Readers fold ``supersede`` lines into the records they name, so no superseded record reads as live (the
original leaves them live forever, docs/tdam-spec.md §9.9). Adding is idempotent by record id.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from pydantic import TypeAdapter

from mnemoflow.memory.l1.models import AddLine, DeleteLine, L1Record, SupersedeLine
from mnemoflow.ports import FileStore
from mnemoflow.storage import Layout

_LINE: TypeAdapter[AddLine | SupersedeLine | DeleteLine] = TypeAdapter(AddLine | SupersedeLine | DeleteLine)


class RecordLog:
    """Reads and appends one user's L1 history. One writer per user at a time (turns are keyed by user)."""

    def __init__(self, files: FileStore, tenant: str, user: str) -> None:
        self._files, self.tenant, self.user = files, tenant, user

    def _days(self) -> list[str]:
        folder = Layout.records_dir(self.tenant, self.user)
        return [f"{folder}/{n}" for n in self._files.list_dir(folder) if n.endswith(".jsonl")]

    def read(self, live_only: bool = True) -> list[L1Record]:
        """Records in write order with supersession applied; only live ones unless ``live_only`` is False."""
        records: dict[str, L1Record] = {}
        marks: dict[str, SupersedeLine] = {}
        deletes: dict[str, DeleteLine] = {}
        for path in self._days():
            for raw in self._files.read_lines(path):
                line = _LINE.validate_json(raw)
                if isinstance(line, AddLine):
                    records.setdefault(line.record.id, line.record)
                elif isinstance(line, DeleteLine):
                    deletes.setdefault(line.id, line)
                else:
                    marks[line.id] = line
        out = []
        for rid, rec in records.items():
            mark, gone = marks.get(rid), deletes.get(rid)
            if mark is not None:
                rec = rec.model_copy(update={"superseded_by": mark.superseded_by, "valid_to": mark.valid_to})
            if gone is not None:
                rec = rec.model_copy(update={"deleted_at": gone.at, "deleted_by": gone.operation_id})
            if rec.live or not live_only:
                out.append(rec)
        return out

    def get(self, ids: Iterable[str]) -> dict[str, L1Record]:
        wanted = set(ids)
        return {r.id: r for r in self.read(live_only=False) if r.id in wanted}

    def append(self, adds: list[L1Record], supersede: list[tuple[str, str]], at: datetime) -> int:
        """Append new records and ``(old_id, new_id)`` marks in one write; records already present are skipped.

        Returns how many records were added. Marks are idempotent by nature (folding twice is the same).
        """
        known = {r.id for r in self.read(live_only=False)}
        lines = [AddLine(record=r).model_dump_json() for r in adds if r.id not in known]
        lines += [SupersedeLine(id=old, superseded_by=new, valid_to=at).model_dump_json() for old, new in supersede]
        if lines:
            path = Layout.records_day(self.tenant, self.user, at.date())
            self._files.repair_tail(path)
            self._files.append_lines(path, lines)
        return sum(1 for r in adds if r.id not in known)

    def delete(self, ids: list[str], at: datetime, operation_id: str) -> None:
        """Append tombstone lines for ``ids`` (an atom deleted through the API). Idempotent: the first wins."""
        if ids:
            path = Layout.records_day(self.tenant, self.user, at.date())
            self._files.repair_tail(path)
            self._files.append_lines(
                path, [DeleteLine(id=i, at=at, operation_id=operation_id).model_dump_json() for i in ids]
            )
