"""Manual changes to one user's atoms: edit, delete, remember. Applied by the worker that owns the user.

Every change is a new line in ``records/`` (the source of truth), then the index follows, so a crash between
the two is repaired by applying the operation again: ids are derived from the operation id, record appends skip
known ids, supersede and delete lines fold the same way twice, and index upserts and deletes are idempotent.
"""

from __future__ import annotations

import hashlib

from mnemoflow.errors import Conflict, NotFound
from mnemoflow.governance.operations import DeleteAtom, ForgetAgent, PatchAtom, Remember
from mnemoflow.memory.l1.dedup import NewAtom
from mnemoflow.memory.l1.models import AtomDraft, L1Record
from mnemoflow.memory.l1.pipeline import L1Pipeline, L1RunResult
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.ports import Clock, Embedder, FileStore
from mnemoflow.ports.vectors import VectorStore
from mnemoflow.scopes import agent_scope

Result = dict[str, int | str | list[str] | None]


def edit_id(tenant: str, user: str, operation_id: str) -> str:
    """The id of the version an edit writes: the same operation retried writes the same version."""
    return "a_" + hashlib.sha256(f"{tenant}\x1f{user}\x1fedit\x1f{operation_id}".encode()).hexdigest()[:24]


class AtomEditor:
    def __init__(
        self, *, files: FileStore, store: VectorStore, embedder: Embedder, clock: Clock, pipeline: L1Pipeline
    ) -> None:
        self._files, self._store, self._embedder, self._clock = files, store, embedder, clock
        self._pipeline = pipeline

    def _record(self, tenant: str, user: str, atom_id: str) -> L1Record:
        record = RecordLog(self._files, tenant, user).get([atom_id]).get(atom_id)
        if record is None:
            raise NotFound(f"no atom {atom_id} for user {user}")
        return record

    def patch(self, tenant: str, op: PatchAtom, operation_id: str) -> Result:
        """A new version superseding the atom: re-embedded, sources and times kept, marked manual."""
        old = self._record(tenant, op.user, op.atom_id)
        new_id = edit_id(tenant, op.user, operation_id)
        if old.superseded_by not in (None, new_id) or old.deleted_at is not None:
            state = f"replaced by {old.superseded_by}" if old.deleted_at is None else "deleted"
            raise Conflict(f"atom {op.atom_id} was {state}; edit the current version")
        now = self._clock.now()
        new = old.model_copy(
            update={
                "id": new_id,
                "content": op.text or old.content,
                "type": op.type or old.type,
                "priority": old.priority if op.priority is None else op.priority,
                "created": now,
                "updated": now,
                "action": "edit",
                "merged_from": [old.id],
                "origin": "manual",
                "operation_id": operation_id,
                "superseded_by": None,
                "valid_to": None,
            }
        )
        RecordLog(self._files, tenant, op.user).append([new], [(old.id, new_id)], now)
        vector = self._embedder.embed([new.search_text])[0]
        self._store.upsert([L1Pipeline.row(tenant, op.user, new, vector)])
        self._store.delete(tenant, op.user, [old.id])
        return {"atom_id": new_id, "supersedes": old.id}

    def delete(self, tenant: str, op: DeleteAtom, operation_id: str) -> Result:
        """A delete line in the records; the row leaves the index now, scenes and persona at their next pass."""
        old = self._record(tenant, op.user, op.atom_id)
        if old.deleted_at is None:
            RecordLog(self._files, tenant, op.user).delete([old.id], self._clock.now(), operation_id)
        removed = self._store.delete(tenant, op.user, [old.id])
        return {"atom_id": old.id, "index_rows_removed": removed}

    def forget_agent(self, tenant: str, op: ForgetAgent, operation_id: str) -> Result:
        """Delete lines for every record of the agent's private scope not deleted yet, then their index rows (those
        of superseded versions too: a crash between the two is repaired by applying the operation again), then the
        agent's scenes and persona of this user."""
        scope = agent_scope(op.agent)
        records = [r for r in RecordLog(self._files, tenant, op.user).read(live_only=False) if r.scope == scope]
        live = [r.id for r in records if r.deleted_at is None]
        RecordLog(self._files, tenant, op.user).delete(live, self._clock.now(), operation_id)
        removed = self._store.delete(tenant, op.user, [r.id for r in records]) if records else 0
        files = self._files.remove(ScenePaths(tenant, op.user, scope).base)  # its scenes and persona: derived
        return {"atoms_deleted": len(live), "index_rows_removed": removed, "scene_files_removed": files}

    async def remember(self, tenant: str, op: Remember, operation_id: str) -> Result:
        """Through the similarity gate and dedup like an extracted atom, in its own scope; a near-duplicate is
        skipped."""
        draft = AtomDraft(
            content=op.text, type=op.type, priority=op.priority, source_message_ids=(operation_id,), scope=op.scope
        )
        atom = NewAtom(draft.atom_id(tenant, op.user), draft, self._embedder.embed([op.text])[0])
        (plan,) = await self._pipeline.deduper.plan(tenant, op.user, [atom])
        result = L1RunResult()
        self._pipeline.write_plans(tenant, op.user, [plan], {}, result, operation_id=operation_id)
        return {
            "action": plan.action,
            "atom_id": atom.id if plan.action != "skip" else None,
            "replaces": [t.id for t in plan.targets],
        }
