"""L1 dedup: decide store / update / merge / skip for each new atom against this user's existing atoms.

Improvements over docs/tdam-spec.md §3.4 (§9.9, §11.8):

* **Similarity gate.** Clear cases cost no model call: a near-duplicate of the same type (cosine ≥
  ``skip_similarity``) is skipped, and an atom with nothing close (best cosine < ``store_below``) is stored.
  Only the rest go to the judge, in one batched call per pass; :class:`DedupStats` counts what the gate saved.
* **Validated targets.** A judge's ``target_ids`` outside that atom's own candidates are dropped; an update or
  merge left without targets becomes a store. Nothing outside the candidate set can be replaced.
* **Scoped.** Candidates come from hybrid search of this (tenant, user) only, and of the new atom's own scope
  (docs/concepts/scopes.md): merging a private atom into a shared one would publish it, the other way round would
  take a fact from the other agents. Two atoms of one batch are duplicates only in the same scope, and a decision of
  the extraction reply may target only shown atoms of that scope. Only atoms about the same
  subject (:mod:`mnemoflow.memory.l1.subject`) are compared: what the assistant answered is never a duplicate of
  what the user said. Vectors are of the text with its search context, so an answer and the user's reply to it
  (each the other's context) measured 0.98 with e5, above the skip gate, and the answer was lost (LongMemEval
  single-session-assistant).
* **Decided in the extraction call.** A model extractor is shown the user's atoms closest to the window
  (``shown``) and may decide each memory there (``proposed``). The gate still runs first; an open atom whose
  decision came with the extraction reply is validated against ``shown`` like a judge's decision and costs no
  judge call. An open atom is left to the judge when the reply gave no decision, or when its closest candidate
  (the one that kept the gate open) was not shown: a decision made without seeing it is not trusted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.errors import StructuredOutputError
from mnemoflow.llm.fallback import fell_back
from mnemoflow.memory.l1.models import Action, AtomDraft, DedupDecision
from mnemoflow.memory.l1.subject import subject
from mnemoflow.ports.llm import LLM
from mnemoflow.ports.vectors import AtomRow, AtomType, VectorStore
from mnemoflow.prompts import l1_dedup as prompt


class DedupConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    candidates: int = Field(5, ge=1, le=20)
    shown: int = Field(8, ge=0, le=20)
    """Atoms closest to a window shown in the extraction prompt, so a model can decide dedup in that call."""
    skip_similarity: float = Field(0.92, gt=0, le=1)
    store_below: float = Field(0.75, ge=0, le=1)
    """Measured on LoCoMo with MiniLM: 0.6 sent 83 of 101 passes to the judge, 0.8 sent 13; 0.75 is between."""

    @classmethod
    def for_model(cls, embedding_model: str) -> DedupConfig:
        """The similarity gate calibrated for an embedding model: cosine scales differ between models.

        multilingual-e5 puts nearly every pair of sentences above 0.85, so MiniLM's thresholds would skip half
        of a user's distinct statements as duplicates. Its thresholds are MiniLM's quantile-matched: on the
        nearest-earlier-statement similarities of LoCoMo speakers (conv-26, conv-41; speaker-named heuristic
        statements), 56.3 % lie below MiniLM's 0.75 and 99.5 % below its 0.92; the same shares of e5's lie
        below 0.93 and 0.978."""
        if embedding_model.startswith("multilingual-e5-small"):
            return cls(skip_similarity=0.978, store_below=0.93)
        return cls()


@dataclass(frozen=True, slots=True)
class NewAtom:
    id: str
    draft: AtomDraft
    vector: list[float]


@dataclass(frozen=True, slots=True)
class Candidate:
    row: AtomRow
    similarity: float


@dataclass(frozen=True, slots=True)
class JudgeItem:
    atom: NewAtom
    candidates: list[Candidate]


@dataclass(frozen=True, slots=True)
class Plan:
    """What to write for one new atom. ``targets`` are existing atoms it replaces (update/merge)."""

    atom: NewAtom
    action: Action
    content: str
    type: AtomType
    priority: int
    targets: list[AtomRow] = field(default_factory=list)
    gated: bool = False


@dataclass
class DedupStats:
    """Counters for reports and the bench: decisions by the gate, by the judge, and model calls made/saved."""

    gated_skip: int = 0
    gated_store: int = 0
    judged: int = 0
    judge_passes: int = 0
    """Passes whose open atoms went to this engine's judge (a model call when the judge is a model)."""
    model_judge_passes: int = 0
    """Passes in which a model engine needs a judge call after the folded extraction call: for a deciding
    extractor the passes actually judged; otherwise (no decisions proposed) the passes with an open atom whose
    closest candidate was not shown, i.e. assuming the model decides every memory it was shown candidates for."""
    judge_calls: int = 0
    judge_calls_saved: int = 0
    decided_in_extraction: int = 0
    """Open atoms decided by the extraction reply (validated like the judge's decisions)."""
    judge_calls_saved_by_extraction: int = 0
    rejected_targets: int = 0
    actions: dict[str, int] = field(default_factory=dict)


class DedupJudge(Protocol):
    @property
    def uses_llm(self) -> bool: ...

    async def judge(self, items: list[JudgeItem]) -> list[DedupDecision]: ...


class LLMDedupJudge:
    """One model call (stage ``l1-dedup``) for all open items of a pass; a reply still invalid after the repair
    try leaves the pass's items to ``fallback`` (the heuristic judge)."""

    uses_llm = True

    def __init__(self, llm: LLM, *, fallback: DedupJudge | None = None, max_tokens: int = 2048) -> None:
        self._llm, self._fallback, self._max_tokens = llm, fallback, max_tokens

    async def judge(self, items: list[JudgeItem]) -> list[DedupDecision]:
        pool = {
            c.row.id: prompt.PoolItem(c.row.id, c.row.text, c.row.type, c.row.priority)
            for item in items
            for c in item.candidates
        }
        new = [
            prompt.NewItem(
                i.atom.id,
                i.atom.draft.content,
                i.atom.draft.type,
                i.atom.draft.priority,
                [c.row.id for c in i.candidates],
            )
            for i in items
        ]
        try:
            reply = await self._llm.complete(
                prompt.build_messages(list(pool.values()), new),
                prompt.DedupOut,
                max_tokens=self._max_tokens,
                stage="l1-dedup",
            )
        except StructuredOutputError as exc:
            if self._fallback is None:
                raise
            fell_back(self._llm, "l1-dedup", exc)
            return await self._fallback.judge(items)
        return reply.decisions


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class Deduper:
    """Plans the writes of one pass. Sync store calls, async judge call; no writes happen here."""

    def __init__(self, store: VectorStore, judge: DedupJudge, config: DedupConfig | None = None) -> None:
        self._store, self._judge = store, judge
        self.config = config or DedupConfig.for_model(store.embedding_model)
        self.stats = DedupStats()

    def _candidates(self, tenant: str, user: str, atom: NewAtom) -> list[Candidate]:
        hits = self._store.search(
            tenant, user, atom.draft.content, atom.vector, self.config.candidates, visible=[atom.draft.scope]
        )
        about = subject(atom.draft.content)
        cands = [Candidate(h.row, cosine(atom.vector, h.row.vector)) for h in hits if subject(h.row.text) == about]
        return sorted(cands, key=lambda c: (-c.similarity, c.row.id))

    def _gate(self, atom: NewAtom, cands: list[Candidate], batch: list[NewAtom]) -> Action | None:
        cfg, kind, about = self.config, atom.draft.type, subject(atom.draft.content)
        near_batch = any(
            b.draft.type == kind
            and b.draft.scope == atom.draft.scope
            and subject(b.draft.content) == about
            and cosine(atom.vector, b.vector) >= cfg.skip_similarity
            for b in batch
        )
        if (
            near_batch
            or any(c.row.id == atom.id for c in cands)
            or any(c.row.type == kind and c.similarity >= cfg.skip_similarity for c in cands)
        ):
            return "skip"
        if not cands or cands[0].similarity < cfg.store_below:
            return "store"
        return None

    def _count(self, action: str) -> None:
        self.stats.actions[action] = self.stats.actions.get(action, 0) + 1

    def shown(
        self,
        tenant: str,
        user: str,
        queries: Sequence[tuple[str, Sequence[float]]],
        visible: Sequence[str] | None = None,
    ) -> list[AtomRow]:
        """The user's atoms closest to a window, for the extraction prompt: one hybrid search of this tenant and
        user per query (a user message of the window), its hits ordered by cosine (the gate's measure),
        interleaved by rank across queries, at most ``config.shown``. ``visible``: the scopes the window's author
        may see (the prompt never lists another agent's private atoms).

        Why per message and not the whole window as one query: a window mixes topics, and one query finds the
        closest candidate of fewer atoms (LoCoMo, MiniLM: the closest candidate of an open atom was missing in
        48 of 112 passes with one query, 24 per message in hybrid order, 5 per message in cosine order), each of
        which then needs a judge call.
        """
        limit = self.config.shown
        if not limit or not queries:
            return []
        ranked = [
            sorted(
                (h.row for h in self._store.search(tenant, user, text, vec, limit, visible=visible)),
                key=_closest_to(vec),
            )
            for text, vec in queries
        ]
        out: dict[str, AtomRow] = {}
        for rank in range(limit):
            for rows in ranked:
                if rank < len(rows) and len(out) < limit:
                    out.setdefault(rows[rank].id, rows[rank])
        return list(out.values())

    async def plan(
        self,
        tenant: str,
        user: str,
        atoms: list[NewAtom],
        *,
        shown: Sequence[AtomRow] | None = None,
        proposed: Mapping[str, DedupDecision] | None = None,
    ) -> list[Plan]:
        """One plan per atom, in input order. Raises whatever the judge raises (the pass then fails whole).

        ``shown``: atoms the extraction prompt listed; ``proposed``: decisions of the extraction reply by atom id
        (None when the extractor does not decide). See the module notes for which atoms still go to the judge.
        """
        decided: dict[str, Plan] = {}
        open_items: list[JudgeItem] = []
        kept: list[NewAtom] = []
        shown_rows = {r.id: r for r in shown or []}
        uninformed = False
        for atom in atoms:
            cands = self._candidates(tenant, user, atom)
            gate = self._gate(atom, cands, kept)
            d = atom.draft
            if gate is None:
                kept.append(atom)
                informed = cands[0].row.id in shown_rows
                uninformed |= not informed
                dec = proposed.get(atom.id) if informed and proposed is not None else None
                if dec is None:
                    open_items.append(JudgeItem(atom, cands))
                    continue
                allowed = [
                    Candidate(r, cosine(atom.vector, r.vector))
                    for r in shown_rows.values()
                    if r.scope == atom.draft.scope
                ]
                decided[atom.id] = self._validated(JudgeItem(atom, allowed), dec)
                self.stats.decided_in_extraction += 1
                continue
            decided[atom.id] = Plan(atom, gate, d.content, d.type, d.priority, gated=True)
            setattr(self.stats, f"gated_{gate}", getattr(self.stats, f"gated_{gate}") + 1)
            if gate == "store":
                kept.append(atom)
        if open_items:
            decisions = {x.record_id: x for x in await self._judge.judge(open_items)}
            self.stats.judged += len(open_items)
            self.stats.judge_passes += 1
            self.stats.judge_calls += int(self._judge.uses_llm)
            for item in open_items:
                decided[item.atom.id] = self._validated(item, decisions.get(item.atom.id))
        elif atoms and all(p.gated for p in decided.values()):
            self.stats.judge_calls_saved += 1
        elif atoms:  # some atom was open, and the extraction reply decided every open one
            self.stats.judge_calls_saved_by_extraction += 1
        self.stats.model_judge_passes += int(bool(open_items) if proposed is not None else uninformed)
        plans = [decided[a.id] for a in atoms]
        for p in plans:
            self._count(p.action)
        return plans

    def _validated(self, item: JudgeItem, dec: DedupDecision | None) -> Plan:
        d = item.atom.draft
        if dec is None:  # the judge skipped this atom: the safe default is to keep it
            return Plan(item.atom, "store", d.content, d.type, d.priority)
        allowed = {c.row.id: c.row for c in item.candidates}
        targets = [allowed[t] for t in dict.fromkeys(dec.target_ids) if t in allowed]
        self.stats.rejected_targets += len(set(dec.target_ids) - set(allowed))
        action: Action = dec.action
        if action in ("update", "merge") and not targets:
            action = "store"
        if action != "merge" and action != "update":
            return Plan(item.atom, action, d.content, d.type, d.priority)
        return Plan(
            item.atom,
            action,
            (dec.merged_content or d.content).strip() or d.content,
            dec.merged_type or d.type,
            d.priority if dec.merged_priority is None else dec.merged_priority,
            targets,
        )


def _closest_to(vec: Sequence[float]) -> Callable[[AtomRow], float]:
    """Sort key: rows most similar to ``vec`` first."""
    return lambda row: -cosine(vec, row.vector)
