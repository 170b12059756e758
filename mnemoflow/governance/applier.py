"""Apply one operation to memory: the dispatch behind the commands topic, run where the atom index is written.

Why it runs in the extractor deployment and not in the stream worker: the index has one writing process (Milvus
Lite allows one process per file; the SQLite file has one writer by design), and that process is the extractor.
The worker that owns the user's partition calls it in partition order and records the outcome, so operations
and L1 passes of a user never interleave inside one process either: the extractor serialises them per user.

An operation that cannot succeed (unknown atom, an edit of a replaced version) comes back as a failed reply
with the reason and is not retried; anything else raised is a transient failure, retried by the worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from pydantic import BaseModel, ConfigDict

from mnemoflow.errors import Conflict, InvalidInput, NotFound
from mnemoflow.governance.atoms import AtomEditor, Result
from mnemoflow.governance.bundle import BundleImporter
from mnemoflow.governance.erase import Eraser, Scrub
from mnemoflow.governance.operations import (
    DeleteAtom,
    EraseSession,
    EraseUser,
    ForgetAgent,
    ImportUser,
    OperationEvent,
    PatchAtom,
    Remember,
)
from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.ports import Clock, Embedder, FileStore
from mnemoflow.ports.vectors import VectorStore


class OperationReply(BaseModel):
    """What applying an operation did (``ok``), or why it cannot be done (``error``; retrying will not help)."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    result: Result = {}
    error: str | None = None


ApplyOperation = Callable[[OperationEvent], Awaitable[OperationReply]]
"""Applies one operation where the index is written (the extractor deployment, or in-process in tests)."""


class OperationApplier:
    def __init__(self, editor: AtomEditor, eraser: Eraser, importer: BundleImporter) -> None:
        self._editor, self._eraser, self._importer = editor, eraser, importer

    @classmethod
    def over(
        cls,
        *,
        files: FileStore,
        store: VectorStore,
        embedder: Embedder,
        clock: Clock,
        pipeline: L1Pipeline,
        scrub: Scrub | None = None,
    ) -> OperationApplier:
        """The applier over the same files, index and dedup as the L1 passes (``pipeline``)."""
        editor = AtomEditor(files=files, store=store, embedder=embedder, clock=clock, pipeline=pipeline)
        return cls(editor, Eraser(files, store, scrub), BundleImporter(files, store, embedder))

    async def apply(self, event: OperationEvent) -> OperationReply:
        try:
            return OperationReply(ok=True, result=await self._dispatch(event))
        except (NotFound, Conflict, InvalidInput) as exc:
            return OperationReply(ok=False, error=str(exc))

    async def _dispatch(self, event: OperationEvent) -> Result:
        op, tenant, oid = event.op, event.tenant, event.operation_id
        match op:
            case PatchAtom():
                return self._editor.patch(tenant, op, oid)
            case DeleteAtom():
                return self._editor.delete(tenant, op, oid)
            case Remember():
                return await self._editor.remember(tenant, op, oid)
            case ForgetAgent():  # its atoms, scenes and persona, then the sessions it owns
                forgotten = self._editor.forget_agent(tenant, op, oid)
                erased = await asyncio.to_thread(
                    self._eraser.erase_agent_sessions, tenant, op.user, op.agent, event.submitted_at, oid
                )
                return {**forgotten, "sessions_erased": erased}
            case EraseUser():  # seconds of file and index work: off the caller's event loop
                return dict(await asyncio.to_thread(self._eraser.erase_user, tenant, op.user, event.submitted_at, oid))
            case EraseSession():
                return dict(
                    await asyncio.to_thread(self._eraser.erase_session, tenant, op.session, event.submitted_at, oid)
                )
            case ImportUser():
                return dict(await asyncio.to_thread(self._importer.import_staged, tenant, op))
