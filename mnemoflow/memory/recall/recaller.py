"""Recall for one user: injected context, the two agent tools, and drill-down to L0 (docs/tdam-spec.md §4).

What the API calls: ``await Recaller(...).recall(RecallRequest(...))`` for ``POST /v1/recall`` (returns
``prepend_context`` and ``system_context`` together, plus structured hits), :meth:`memory_search`,
:meth:`conversation_search` and :meth:`drill_down`. Every query names tenant and user; the store enforces it.

Ports are sync (store, embedder, files); :meth:`recall` runs them in worker threads to bound them and to overlap
what does not depend on each other: the query embedding runs beside the reading of the persona and navigation,
and the search starts once the vector is there. An embedding that misses ``embed_deadline_s`` leaves the search
to BM25 alone, said in ``degraded``; a search past ``timeout_s`` returns no hits but still the persona and
navigation (the original drops all, docs/tdam-spec.md §9.18).

A :class:`~mnemoflow.scopes.Viewer` limits every search to the scopes its agent may see (docs/concepts/scopes.md),
inside the store's query; without one (an admin key, and every caller from before scopes) the user's atoms of
every scope are searched, as before. Each hit says its scope. A time the query names
("last week", "上个月") is resolved against the clock's now, or against the ``now`` a caller passes to :meth:`hits`
(a benchmark replaying a conversation asks at its time).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from mnemoflow.lexical import is_chinese
from mnemoflow.memory.conversations import ConversationIndex
from mnemoflow.memory.l0 import L0Message, read_l0
from mnemoflow.memory.l1.models import L1Record
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.recall.config import RecallConfig, search_hits
from mnemoflow.memory.recall.format import ToolNames, clip, fit, memory_line, prepend_context, system_context
from mnemoflow.memory.recall.sources import ContextSource, FileContextSource
from mnemoflow.ports import Embedder, FileStore
from mnemoflow.ports.clock import Clock, SystemClock
from mnemoflow.ports.vectors import AtomType, Hit, VectorStore
from mnemoflow.scopes import SHARED, Viewer, scope_parts

log = logging.getLogger(__name__)
T = TypeVar("T")


class RecallHit(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    score: float
    type: AtomType
    priority: int
    text: str
    source_message_ids: list[str]
    dense_rank: int | None = None
    bm25_rank: int | None = None
    scope: str = SHARED
    """Who else may see it: ``shared`` (every agent of the user), ``team:<team>`` or ``agent:<agent>``."""

    @classmethod
    def of(cls, h: Hit) -> RecallHit:
        r = h.row
        return cls(
            id=h.id,
            score=h.score,
            type=r.type,
            priority=r.priority,
            text=r.text,
            source_message_ids=list(r.source_message_ids),
            dense_rank=h.dense_rank,
            bm25_rank=h.bm25_rank,
            scope=r.scope,
        )


class RecallResult(BaseModel):
    prepend_context: str
    system_context: str
    hits: list[RecallHit]
    persona: str
    timed_out: bool = False
    degraded: Literal["lexical"] | None = None
    """``lexical``: the query embedding missed its deadline, so the hits are BM25's alone."""
    elapsed_ms: float = 0.0
    stages_ms: dict[str, float] = {}
    """Where the recall spent its time, ms, each measured as the request waited for it: ``embed`` (the query
    embedding; absent when it did not run, e.g. under ``min_query_chars``), ``search`` (the index search and
    fusion), ``context`` (the persona and navigation read, which runs beside the other two, so the stages do not
    add up to ``elapsed_ms``). Empty from :meth:`Recaller.recall_sync`."""


@dataclass(frozen=True, slots=True)
class ConversationHit:
    message: L0Message
    score: float


@dataclass(frozen=True, slots=True)
class DrillDown:
    """An atom's record (live or superseded) and the L0 messages it came from, in L0 order; ``hidden``: how many of
    those the viewer may not read (another agent's conversation a shared fact came from)."""

    record: L1Record | None
    messages: list[L0Message] = field(default_factory=list)
    hidden: int = 0


SkillsIndex = Callable[[str, Sequence[str]], str]
"""The skills index of a tenant for a viewer's scopes (:meth:`mnemoflow.skills.index.SkillsIndexSource.index`): a
seam, so that recall's core does not load the skill pass (the API passes it; without it recall shows no skills)."""


class Recaller:
    def __init__(
        self,
        *,
        store: VectorStore,
        embedder: Embedder,
        files: FileStore,
        context: ContextSource | None = None,
        skills: SkillsIndex | None = None,
        config: RecallConfig | None = None,
        tools: ToolNames | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._store, self._embedder, self._files = store, embedder, files
        self._clock = clock or SystemClock()
        self._context = context or FileContextSource(files)
        self._skills = skills
        self.config = config or RecallConfig()
        self.tools = tools or ToolNames()

    @property
    def store(self) -> VectorStore:
        """The atom index this recaller searches (``/health`` probes it)."""
        return self._store

    def hits(
        self,
        tenant: str,
        user: str,
        query: str,
        vector: Sequence[float] | None = None,
        config: RecallConfig | None = None,
        k: int | None = None,
        now: datetime | None = None,
        viewer: Viewer | None = None,
    ) -> list[Hit]:
        """The search alone; embeds the query unless ``vector`` is given (the bench times it without). A time in
        the query is resolved against ``now``, by default the clock's; ``viewer`` limits it to what it may see."""
        cfg = config or self.config
        query = query[: cfg.max_query_chars]
        if len(query.strip()) < cfg.min_query_chars:
            return []
        if vector is None and "vector" in cfg.methods:
            vector = self._embedder.embed_query([query])[0]
        visible = None if viewer is None else viewer.scopes()
        return search_hits(self._store, tenant, user, query, vector, cfg, k, now or self._clock.now(), visible)

    def render(
        self,
        tenant: str,
        user: str,
        hits: list[Hit],
        config: RecallConfig | None = None,
        timed_out: bool = False,
        elapsed_ms: float = 0.0,
        viewer: Viewer | None = None,
    ) -> RecallResult:
        """The hits as prepend lines, and the persona and scene navigation of the scopes ``viewer`` sees (the
        shared scope's alone without one)."""
        return self._rendered(
            hits, self.contexts(tenant, user, config, viewer), config, timed_out, elapsed_ms=elapsed_ms
        )

    def contexts(
        self, tenant: str, user: str, config: RecallConfig | None = None, viewer: Viewer | None = None
    ) -> tuple[str, str, str]:
        """The persona and the scene navigation of the scopes ``viewer`` sees, each within its budget, and the
        index of the tenant's skills it sees (shared, and its agent's own)."""
        cfg = config or self.config
        scopes = (SHARED,) if viewer is None else viewer.scopes()
        persona = scoped_context(scopes, partial(self._context.persona, tenant, user), cfg.max_persona_chars)
        nav = scoped_context(scopes, partial(self._context.navigation, tenant, user), cfg.max_navigation_chars)
        return persona, nav, self._skills(tenant, scopes) if self._skills is not None else ""

    def _rendered(
        self,
        hits: list[Hit],
        contexts: tuple[str, str, str],
        config: RecallConfig | None,
        timed_out: bool = False,
        degraded: Literal["lexical"] | None = None,
        elapsed_ms: float = 0.0,
        stages_ms: dict[str, float] | None = None,
    ) -> RecallResult:
        cfg = config or self.config
        lines = fit([memory_line(h.row, cfg.max_line_chars, self.tools) for h in hits], cfg.max_prepend_chars)
        persona, nav, skills = contexts
        return RecallResult(
            prepend_context=prepend_context(lines),
            system_context=system_context(persona, nav, self.tools, bool(lines), skills),
            hits=[RecallHit.of(h) for h in hits[: len(lines)]],
            persona=persona,
            timed_out=timed_out,
            degraded=degraded,
            elapsed_ms=elapsed_ms,
            stages_ms=stages_ms or {},
        )

    def recall_sync(
        self,
        tenant: str,
        user: str,
        query: str,
        vector: Sequence[float] | None = None,
        config: RecallConfig | None = None,
        viewer: Viewer | None = None,
    ) -> RecallResult:
        """Search and render without a timeout (tests, benchmarks, callers with their own deadline)."""
        start = time.perf_counter()
        hits = self.hits(tenant, user, query, vector, config, viewer=viewer)
        return self.render(tenant, user, hits, config, elapsed_ms=(time.perf_counter() - start) * 1000, viewer=viewer)

    async def recall(
        self, tenant: str, user: str, query: str, config: RecallConfig | None = None, viewer: Viewer | None = None
    ) -> RecallResult:
        cfg = config or self.config
        start = time.perf_counter()
        stages: dict[str, float] = {}
        contexts = asyncio.ensure_future(_timed(stages, "context", self.contexts, tenant, user, cfg, viewer))
        hits: list[Hit] = []
        degraded: Literal["lexical"] | None = None
        try:
            search = self._search(tenant, user, query, cfg, viewer, stages)
            hits, degraded = await asyncio.wait_for(search, cfg.timeout_s)
            timed_out = False
        except TimeoutError:
            timed_out = True
        except BaseException:
            contexts.cancel()  # a failed search answers nothing; its persona read is not waited for
            raise
        elapsed = (time.perf_counter() - start) * 1000
        return self._rendered(hits, await contexts, cfg, timed_out, degraded, elapsed, stages)

    async def _search(
        self, tenant: str, user: str, query: str, cfg: RecallConfig, viewer: Viewer | None, stages: dict[str, float]
    ) -> tuple[list[Hit], Literal["lexical"] | None]:
        """The hits, embedding the query within ``embed_deadline_s`` (when BM25 can answer alone) or falling back
        to BM25 alone. Notes the ``embed`` and ``search`` stages in ``stages``."""
        query = query[: cfg.max_query_chars]
        vector: Sequence[float] | None = None
        if "vector" in cfg.methods and len(query.strip()) >= cfg.min_query_chars:
            embedding = _timed(stages, "embed", self._embedder.embed_query, [query])
            try:
                if "bm25" in cfg.methods:
                    (vector,) = await asyncio.wait_for(embedding, cfg.embed_deadline_s)
                else:  # nothing to fall back to: the search waits for its vector
                    (vector,) = await embedding
            except TimeoutError:
                log.warning(
                    "recall for %s/%s: the query embedding missed its %.0f ms deadline; answering from BM25 alone",
                    tenant,
                    user,
                    cfg.embed_deadline_s * 1000,
                )
                lexical = cfg.model_copy(update={"methods": ("bm25",)})
                hits = await _timed(stages, "search", self.hits, tenant, user, query, None, lexical, viewer=viewer)
                return hits, "lexical"
        return await _timed(stages, "search", self.hits, tenant, user, query, vector, cfg, viewer=viewer), None

    def memory_search(
        self,
        tenant: str,
        user: str,
        query: str,
        limit: int = 5,
        type: AtomType | None = None,
        viewer: Viewer | None = None,
    ) -> list[RecallHit]:
        """The agent tool: limit clamped to 1..20; the type and scope filters run inside the store query, not after."""
        cfg = self.config.model_copy(update={"types": (type,) if type else None})
        found = self.hits(tenant, user, query, None, cfg, max(1, min(limit, 20)), viewer=viewer)
        return [RecallHit.of(h) for h in found]

    def conversation_search(
        self,
        tenant: str,
        user: str,
        query: str,
        limit: int = 5,
        session: str | None = None,
        viewer: Viewer | None = None,
    ) -> list[ConversationHit]:
        """The agent tool over raw L0 of this user: BM25 from the user's conversation index, caught up with L0 by
        this call (L0 is not in the atom index), with the same lexical terms as the atom index, so Chinese words
        match inside unsegmented sentences. A viewer reads the messages of the scopes it may see only: the raw
        conversation belongs to the agent that had it."""
        visible = None if viewer is None else viewer.scopes()
        found = ConversationIndex(self._files).search(tenant, user, query, max(1, min(limit, 20)), session, visible)
        return [ConversationHit(m, s) for m, s in found]

    def drill_down(self, tenant: str, user: str, atom_id: str, viewer: Viewer | None = None) -> DrillDown:
        """Atom → its record (even if superseded) → the L0 messages of its ``source_message_ids``. A viewer gets
        nothing for an atom of a scope it may not see (as for an unknown atom), and of the messages only those it
        may read, with the count of the others."""
        record = RecordLog(self._files, tenant, user).get([atom_id]).get(atom_id)
        if record is None:
            rows = self._store.get(tenant, user, [atom_id])
            ids, scope = (set(rows[0].source_message_ids), rows[0].scope) if rows else (set(), SHARED)
        else:
            ids, scope = set(record.source_message_ids), record.scope
        visible = None if viewer is None else viewer.scopes()
        if visible is not None and scope not in visible:
            return DrillDown(None)
        msgs = [m for m in read_l0(self._files, tenant, user, limit=10**7) if m.id in ids] if ids else []
        shown = [m for m in msgs if visible is None or m.scope in visible]
        return DrillDown(record, shown, len(msgs) - len(shown))


async def _timed(stages: dict[str, float], stage: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn`` in a worker thread, its time as the caller waited for it (the thread's start included) noted in
    ``stages``, also when it fails or its caller gives up on it."""
    start = time.perf_counter()
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    finally:
        stages[stage] = (time.perf_counter() - start) * 1000


SCOPE_TITLES = {
    "en": {"team": "Shared within team {}", "agent": "Known to agent {} only"},
    "zh": {"team": "团队 {} 内共享", "agent": "仅 {} 可见"},
}
"""The line that opens a private scope's part of the persona or navigation, so the agent knows whose it is; in the
language the part is written in, as the persona is."""


def scoped_context(scopes: Sequence[str], read: Callable[[str], str], budget: int) -> str:
    """One scope's text after another (shared, team, agent), within ``budget`` characters: each private part gets
    at most a quarter of it, the shared one what they leave. A viewer with no private memory gets the shared text
    as it was, with the whole budget."""
    private = []
    for scope in scopes[1:]:
        if text := read(scope).strip():
            kind, name = scope_parts(scope)
            title = SCOPE_TITLES["zh" if is_chinese([text]) else "en"][kind].format(name)
            private.append(clip(f"### {title}\n{text}", budget // 4))
    shared = clip(read(scopes[0]), max(0, budget - sum(len(p) + 2 for p in private)))
    return "\n\n".join(part for part in (shared, *private) if part)
