"""One L1 pass for one user: windows of L0 → extraction → dedup → records + index → cursor.

What the wiring calls: ``await L1Pipeline(...).run(tenant, user)`` when :class:`~.triggers.L1Triggers`
decides to run, then ``on_success`` or ``on_failure`` with the outcome. Order of effects per window, and why:

1. extraction and dedup decisions (no writes; a failure here raises and leaves everything as it was). A model
   extractor is shown the user's atoms closest to the window and decides dedup in the same call, so a window
   costs one model call; the judge is called only for open atoms the reply left undecided (see ``dedup``);
2. the records file (new records + supersede marks, one append; idempotent by record id);
3. the index (upsert new atoms, then delete superseded ones: no stale fact stays searchable);
4. the cursor, last — so a crash anywhere before re-reads the window, and the deterministic atom ids plus the
   gate make the re-run add nothing twice.

Steps 1-3 run once per author of the window (:func:`~.window.split_by_author`; one part when one agent had the
conversation): each draft gets its scope from its type and author (:mod:`.scoping`), and dedup compares it only with
atoms of the same scope (docs/concepts/scopes.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from mnemoflow.memory.l0 import L0Message
from mnemoflow.memory.l1.dedup import DedupConfig, Deduper, DedupJudge, NewAtom, Plan
from mnemoflow.memory.l1.extract import DecidingExtractor, Extractor, last_scene
from mnemoflow.memory.l1.models import AtomDraft, DedupDecision, L1Record
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.l1.scoping import decide_scope
from mnemoflow.memory.l1.state import load_cursor, save_cursor
from mnemoflow.memory.l1.window import Author, Window, plan_windows, split_by_author
from mnemoflow.ports import Clock, Embedder, FileStore
from mnemoflow.ports.vectors import MAX_CONTEXT, AtomRow, VectorStore, search_text
from mnemoflow.scopes import Viewer, own_scope

_COUNTERS = {"store": "stored", "update": "updated", "merge": "merged"}


@dataclass
class L1RunResult:
    """What one ``run`` did. ``llm_calls`` counts extraction and judge calls actually made."""

    windows: int = 0
    messages: int = 0
    drafts: int = 0
    stored: int = 0
    updated: int = 0
    merged: int = 0
    skipped: int = 0
    superseded: int = 0
    llm_calls: int = 0
    model_calls_needed: int = 0
    """Calls a model engine makes for the same work: one per window with user text (extraction with the dedup
    decisions folded in) + judge passes for open atoms left undecided (``DedupStats.model_judge_passes``)."""
    atom_ids: list[str] = field(default_factory=list)


class L1RunReply(BaseModel):
    """The extractor's answer to one run request (Serve deployment -> stream worker): what the pass did, or why
    it failed. A failure is a reply, not an exception, so the job handler hands it to the trigger machine, which
    retries later or parks the work."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    error: str | None = None
    result: L1RunResult | None = None
    replica_ms: float = 0.0
    """Time in the extractor replica, ms, from the request's batch starting to this reply (waits for the user's
    lock and for the pass loop included); what the caller waited beyond it is Serve's hop and batch wait."""
    pass_ms: float = 0.0
    """The pass itself, ms (a request that joined a pass in flight: that whole pass's time)."""

    @classmethod
    def failed(cls, exc: BaseException) -> L1RunReply:
        return cls(ok=False, error=f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True, slots=True)
class L1Settings:
    new_size: int = 10
    background: int = 5
    max_windows: int | None = None
    """Bound the work of one run (the rest stays pending for the next); None processes the whole backlog."""
    count_model_calls: bool = False
    """With a heuristic extractor, also retrieve the atoms a model would be shown, only so that
    ``model_calls_needed`` is exact (benchmarks); off in service, where it would be work for a counter."""


class L1Pipeline:
    """Extraction + dedup + writes for one user at a time. Ports are injected; nothing global."""

    def __init__(
        self,
        *,
        files: FileStore,
        store: VectorStore,
        embedder: Embedder,
        extractor: Extractor,
        judge: DedupJudge,
        clock: Clock,
        dedup: DedupConfig | None = None,
        settings: L1Settings | None = None,
    ) -> None:
        self._files, self._store, self._embedder = files, store, embedder
        self._extractor, self._clock = extractor, clock
        self.deduper = Deduper(store, judge, dedup)
        self.settings = settings or L1Settings()

    def pending(self, tenant: str, user: str) -> list[Window]:
        """Windows the next run would process (empty: nothing to do)."""
        s = self.settings
        return plan_windows(
            self._files,
            tenant,
            user,
            load_cursor(self._files, tenant, user),
            new_size=s.new_size,
            background=s.background,
        )

    async def run(self, tenant: str, user: str) -> L1RunResult:
        """Process the backlog window by window; raises on the first failing window (earlier ones are kept)."""
        result = L1RunResult()
        cursor = load_cursor(self._files, tenant, user)
        windows = self.pending(tenant, user)[: self.settings.max_windows]
        for window in windows:
            drafts = 0
            scenes: dict[str, str | None] = {}
            for author, part in split_by_author(window):
                key = own_scope(author.agent, author.team)
                found = await self._extract_part(tenant, user, author, part, cursor.scene_of(key), result)
                drafts, scenes[key] = drafts + len(found), last_scene(found)
            cursor = cursor.advanced(window.done, scenes)
            save_cursor(self._files, tenant, user, cursor)
            result.windows += 1
            result.messages += window.consumed
            result.drafts += drafts
            # Embedding, dedup and writes above run on the caller's event loop; between windows it answers the
            # rest (a replica's health check, other users' passes), so a backlog of hundreds of windows does not
            # look like a hung extractor.
            await asyncio.sleep(0)
        return result

    async def _extract_part(
        self, tenant: str, user: str, author: Author, window: Window, previous_scene: str, result: L1RunResult
    ) -> list[AtomDraft]:
        """Extraction, dedup and writes for one author's part of a window; returns its drafts."""
        calls_before, passes_before = self.deduper.stats.judge_calls, self.deduper.stats.model_judge_passes
        has_user_text = any(m.role == "user" for m in window.new)
        decider = self._extractor if isinstance(self._extractor, DecidingExtractor) else None
        wanted = has_user_text and (decider is not None or self.settings.count_model_calls)
        viewer = Viewer(agent=author.agent, team=author.team)
        shown = self._shown(tenant, user, window, viewer) if wanted else []
        decisions: list[DedupDecision | None] | None = None
        if decider is not None:
            extraction = await decider.extract_decided(user, window, previous_scene, shown)
            drafts, decisions = extraction.drafts, extraction.decisions
        else:  # shown atoms (when counted) only feed the count of what a model engine would need
            drafts = await self._extractor.extract(user, window, previous_scene) if window.new else []
        result.llm_calls += int(self._extractor.uses_llm and has_user_text)
        result.model_calls_needed += int(has_user_text)
        by_id = {m.id: m for m in [*window.background, *window.new]}
        drafts = [
            d.model_copy(
                update={"scope": decide_scope(d, [by_id[s] for s in d.source_message_ids if s in by_id], author)}
            )
            for d in drafts
        ]
        vectors = self._embedder.embed([d.search_text for d in drafts]) if drafts else []
        atoms = [NewAtom(d.atom_id(tenant, user), d, v) for d, v in zip(drafts, vectors, strict=True)]
        proposed = None
        if decisions is not None:
            proposed = {
                a.id: dec.model_copy(update={"record_id": a.id})
                for a, dec in zip(atoms, decisions, strict=True)
                if dec is not None
            }
        plans = await self.deduper.plan(tenant, user, atoms, shown=shown, proposed=proposed)
        result.llm_calls += self.deduper.stats.judge_calls - calls_before
        result.model_calls_needed += self.deduper.stats.model_judge_passes - passes_before
        self.write_plans(tenant, user, plans, by_id, result)
        return drafts

    def _shown(self, tenant: str, user: str, window: Window, viewer: Viewer) -> list[AtomRow]:
        """The user's atoms closest to the window's new user messages that its author may see (what the extraction
        prompt lists)."""
        texts = [m.content[:2000] for m in window.new if m.role == "user"]
        queries = list(zip(texts, self._embedder.embed(texts), strict=True))
        return self.deduper.shown(tenant, user, queries, viewer.scopes())

    def write_plans(
        self,
        tenant: str,
        user: str,
        plans: list[Plan],
        by_id: dict[str, L0Message],
        result: L1RunResult,
        operation_id: str | None = None,
    ) -> None:
        """Records, then the index, for the dedup plans of one pass. ``by_id``: the L0 messages the drafts came
        from. ``operation_id``: a manual write (``remember``), recorded as such, with no L0 provenance of its own."""
        now = self._clock.now()
        log = RecordLog(self._files, tenant, user)
        writes = [p for p in plans if p.action != "skip"]
        result.skipped += len(plans) - len(writes)
        old = log.get(t.id for p in writes for t in p.targets)
        records, supersede = [], []
        for p in writes:
            rec = self._record(p, by_id, old, now, operation_id)
            records.append(rec)
            supersede += [(t.id, rec.id) for t in p.targets]
            counter = _COUNTERS[p.action]
            setattr(result, counter, getattr(result, counter) + 1)
        if not records:
            return
        log.append(records, supersede, now)
        changed = [p.content != p.atom.draft.content for p in writes]
        texts = [search_text(p.content, p.atom.draft.context) for p, c in zip(writes, changed, strict=True) if c]
        fresh = iter(self._embedder.embed(texts) or [])
        rows = [
            self.row(tenant, user, rec, next(fresh) if c else p.atom.vector)
            for p, rec, c in zip(writes, records, changed, strict=True)
        ]
        self._store.upsert(rows)
        gone = [old_id for old_id, _ in supersede]
        if gone:
            result.superseded += self._store.delete(tenant, user, gone)
        result.atom_ids += [r.id for r in records]

    @staticmethod
    def _record(
        p: Plan, by_id: dict[str, L0Message], old: dict[str, L1Record], now: datetime, operation_id: str | None = None
    ) -> L1Record:
        d = p.atom.draft
        sources = list(d.source_message_ids) if operation_id is None else []
        stamps = [by_id[s].ts for s in sources if s in by_id] or [now]
        for t in p.targets:  # provenance survives update/merge (the original keeps only the new atom's)
            prev = old.get(t.id)
            sources += prev.source_message_ids if prev else t.source_message_ids
            stamps += prev.timestamps if prev else [t.created]
        return L1Record(
            id=p.atom.id,
            content=p.content,
            type=p.type,
            priority=p.priority,
            scene_name=d.scene_name,
            source_message_ids=list(dict.fromkeys(sources)),
            activity_start=d.activity_start,
            activity_end=d.activity_end,
            context=d.context,
            scope=d.scope,
            timestamps=sorted(set(stamps)),
            created=now,
            updated=now,
            action=p.action if p.action != "skip" else "store",
            merged_from=[t.id for t in p.targets],
            origin="extraction" if operation_id is None else "manual",
            operation_id=operation_id,
        )

    @staticmethod
    def row(tenant: str, user: str, rec: L1Record, vector: list[float]) -> AtomRow:
        """``created`` in the index is when the fact was first said (shown by recall), ``updated`` when the record
        was written (not when the row was: a reindexed or imported memory orders superseded facts as before)."""
        return AtomRow(
            id=rec.id,
            tenant=tenant,
            user=user,
            type=rec.type,
            priority=rec.priority,
            text=rec.content[:8000],
            context=rec.context[:MAX_CONTEXT],
            vector=vector,
            created=rec.activity_start or rec.timestamps[0],
            updated=rec.updated,
            source_message_ids=rec.source_message_ids,
            scope=rec.scope,
        )
