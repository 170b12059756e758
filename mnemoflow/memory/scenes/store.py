"""One user's scene files: read them, and write a pass all-or-nothing.

Why a journal: a pass writes several files and the FileStore port replaces one file at a time. Before the
first write, :meth:`SceneStore.commit` records the old bytes of every file the pass will touch in
``scenes/.backup/journal.json`` (``committed: false``); after the last write it marks the journal committed and
copies it into a rotating slot (the last ``backup_slots`` passes stay restorable, spec "keep 10"). If a write
fails, the old bytes are put back at once; if the process dies mid-pass, :meth:`recover` (run first by every
pass) finds the open journal and puts them back. A file the pass created is "put back" as a tombstone, because
the port has no delete; tombstones are invisible to everything that reads scenes.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mnemoflow.errors import InvalidInput, StorageError
from mnemoflow.memory.scenes.model import SceneBlock, format_ts, parse_scene, render_scene
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.ports import FileStore
from mnemoflow.scopes import SHARED

log = logging.getLogger(__name__)

_TOMBSTONE = "-----META-START-----\nsummary: \nheat: 0\ndeleted: true\n-----META-END-----\n[DELETED]\n"


class SceneStore:
    """Scene files of one (tenant, user) in one scope; every path goes through :meth:`ScenePaths.scene`."""

    def __init__(
        self, files: FileStore, tenant: str, user: str, scope: str = SHARED, *, backup_slots: int = 10
    ) -> None:
        self.files = files
        self.paths = ScenePaths(tenant, user, scope)
        self.backup_slots = backup_slots

    def names(self) -> list[str]:
        """Every scene file name, tombstones included; names that fail the safety check are ignored."""
        out = []
        for name in self.files.list_dir(self.paths.scenes_dir):
            try:
                self.paths.scene(name, self.files)
            except InvalidInput:
                continue  # a stray file (or a planted symlink) is never read or written
            out.append(name)
        return out

    def read(self, name: str) -> SceneBlock | None:
        data = self.files.read_bytes(self.paths.scene(name, self.files))
        return None if data is None else parse_scene(name, data.decode("utf-8", errors="replace"))

    def load(self, *, include_deleted: bool = False) -> dict[str, SceneBlock]:
        blocks = {}
        for name in self.names():
            block = self.read(name)
            if block is not None and (include_deleted or not block.deleted):
                blocks[name] = block
        return blocks

    def recover(self) -> bool:
        """Undo a pass that died mid-commit; True if something was restored."""
        journal = self._read_journal()
        if journal is None or journal.get("committed", True):
            return False
        log.warning("scenes %s: restoring pass %s left open by a crash", self.paths.scenes_dir, journal.get("pass"))
        self._restore(journal["files"])
        journal["committed"] = True
        journal["rolled_back"] = True
        self._write_journal(journal)
        return True

    def commit(self, writes: dict[str, SceneBlock], pass_id: str) -> None:
        """Write ``writes`` as one unit: all files change, or (on :class:`StorageError`) none does."""
        if not writes:
            return
        paths = {name: self.paths.scene(name, self.files) for name in writes}  # refuse before anything is written
        old: dict[str, str | None] = {}
        for name, path in paths.items():
            data = self.files.read_bytes(path)
            old[name] = None if data is None else data.decode("utf-8", errors="replace")
        previous = self._read_journal() or {}
        seq = int(previous.get("seq", -1)) + 1
        journal = {"pass": pass_id, "seq": seq, "committed": False, "files": old}
        self._write_journal(journal)
        try:
            for name, block in writes.items():
                self.files.write_atomic(paths[name], render_scene(block).encode())
        except Exception as exc:
            log.error("scenes %s: pass %s failed mid-write (%s); restoring", self.paths.scenes_dir, pass_id, exc)
            self._restore(old)
            journal.update(committed=True, rolled_back=True)
            self._write_journal(journal)
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"scene pass {pass_id} failed and was rolled back: {exc}") from exc
        journal["committed"] = True
        self._write_journal(journal)
        self.files.write_atomic(self.paths.scene_backup(seq % self.backup_slots), json.dumps(journal).encode())

    def _restore(self, old: dict[str, str | None]) -> None:
        for name, text in old.items():
            restored = text if text is not None else _TOMBSTONE
            self.files.write_atomic(self.paths.scene(name, self.files), restored.encode())

    def _read_journal(self) -> dict[str, Any] | None:
        data = self.files.read_bytes(self.paths.journal)
        if data is None:
            return None
        try:
            journal = json.loads(data)
        except ValueError as exc:
            raise StorageError(f"unreadable scene journal {self.paths.journal}: {exc}") from exc
        return journal if isinstance(journal, dict) else None

    def _write_journal(self, journal: dict[str, Any]) -> None:
        self.files.write_atomic(self.paths.journal, json.dumps(journal).encode())


def scene_index(blocks: dict[str, SceneBlock]) -> list[dict[str, object]]:
    """The spec's ``scene_index.json`` rows, hottest first: filename, summary, heat, created, updated."""
    rows = sorted(blocks.values(), key=lambda b: (-b.heat, b.filename))
    return [
        {
            "filename": b.filename,
            "summary": b.summary,
            "heat": b.heat,
            "created": format_ts(b.created) if b.created else None,
            "updated": format_ts(b.updated) if b.updated else None,
        }
        for b in rows
    ]
