"""Metrics of the Ray actors and Serve replicas, through ``ray.util.metrics``: Ray's metrics agent on each node
exports them (prefixed ``ray_``) at ``http://<node>:<MetricsExportPort>/metrics``, every few seconds.

Why Ray's API and not prometheus_client: a shard or a replica is a Ray worker process with no port of its own, and
may move between nodes; Ray's agent is already there on every node, and tags the series with the worker and node.
Each class is created inside the actor or replica (a metric belongs to the process that records it) and reads
what the core already returns (a pass's ``L1RunResult``, the deduper's ``DedupStats``, the LLM's ``CallRecord``).
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ray.util.metrics import Counter, Gauge, Histogram

from mnemoflow.llm.usage import CallRecord
from mnemoflow.memory.l1.dedup import DedupStats
from mnemoflow.memory.l1.pipeline import L1RunResult
from mnemoflow.skills.learn import Learnt

LATENCY_BOUNDARIES_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]
GATE_DECISIONS = {
    "gated_skip": "skip",
    "gated_store": "store",
    "judged": "judged",
    "decided_in_extraction": "extraction",
}
"""DedupStats fields by the decision they count: the similarity gate skipped or stored the atom, or left it open to
the judge, or to the extraction reply that decided it. One decision per atom of a pass."""


def decisions_since(seen: DedupStats, now: DedupStats) -> dict[str, int]:
    """Dedup decisions made between two readings of the deduper's running totals, by decision."""
    return {decision: getattr(now, field) - getattr(seen, field) for field, decision in GATE_DECISIONS.items()}


def _add(counter: Counter, value: float, tags: dict[str, str]) -> None:
    """Ray's counters refuse 0; a zero is simply nothing to add."""
    if value > 0:
        counter.inc(value, tags=tags)


class ShardMetrics:
    def __init__(self, shard: int) -> None:
        self._tags = {"shard": str(shard)}
        keys = ("shard",)
        self._loaded = Counter(
            "mnemoflow_shard_sessions_loaded", "Session states loaded from their files", tag_keys=keys
        )
        self._evicted = Counter(
            "mnemoflow_shard_sessions_evicted",
            "Session states dropped from memory, by why",
            tag_keys=("shard", "reason"),
        )
        self._in_memory = Gauge("mnemoflow_shard_sessions_in_memory", "Session states held", tag_keys=keys)
        self._compaction = Histogram(
            "mnemoflow_shard_compaction_seconds", "One compaction turn", boundaries=LATENCY_BOUNDARIES_S, tag_keys=keys
        )

        self._refined = Counter(
            "mnemoflow_shard_refined",
            "Offload items the model's background pass handled, by stage and outcome (applied: the model's output "
            "stands; late, skipped: the heuristic's stays; fallback: the model failed)",
            tag_keys=("shard", "stage", "outcome"),
        )
        self._refine_queue = Gauge(
            "mnemoflow_shard_refine_queued", "Sessions waiting for the model's background pass", tag_keys=keys
        )
        self._skills = Counter(
            "mnemoflow_shard_skill_tasks",
            "Finished long tasks the skill pass handled, by what it did (store, merge, skip)",
            tag_keys=("shard", "action"),
        )
        self._refine_dropped = Counter(
            "mnemoflow_shard_refine_dropped",
            "Sessions not queued for the model's pass because the queue was full (they keep the heuristic's output)",
            tag_keys=keys,
        )

    def loaded(self) -> None:
        self._loaded.inc(tags=self._tags)

    def refined(self, stage: str, outcome: str, items: int) -> None:
        _add(self._refined, items, {**self._tags, "stage": stage, "outcome": outcome})

    def refine_queued(self, sessions: int) -> None:
        self._refine_queue.set(sessions, tags=self._tags)

    def refine_dropped(self) -> None:
        self._refine_dropped.inc(tags=self._tags)

    def evicted(self, reason: str) -> None:
        self._evicted.inc(tags={**self._tags, "reason": reason})

    def held(self, sessions: int) -> None:
        self._in_memory.set(sessions, tags=self._tags)

    def compacted(self, seconds: float) -> None:
        self._compaction.observe(seconds, tags=self._tags)

    def skills_learnt(self, done: Sequence[Learnt]) -> None:
        for action, count in Tally(item.action for item in done).items():
            _add(self._skills, count, {**self._tags, "action": action})


class ExtractorMetrics:
    def __init__(self) -> None:
        self._runs = Counter("mnemoflow_l1_runs", "L1 passes run by the extractor, by result", tag_keys=("result",))
        self._running = Gauge("mnemoflow_l1_running", "L1 passes in flight in this replica")
        self._atoms = Counter(
            "mnemoflow_l1_atoms", "Atoms of L1 passes by what dedup did with them", tag_keys=("action",)
        )
        self._gate = Counter(
            "mnemoflow_l1_dedup_decisions",
            "Dedup decisions per atom: the similarity gate's skip or store, else the judge's or the extraction reply's",
            tag_keys=("decision",),
        )
        self._rows = Gauge(
            "mnemoflow_index_rows",
            "Atoms in the index, per tenant, after the last pass or operation",
            tag_keys=("tenant",),
        )
        self._seen = DedupStats()

    def running(self, runs: int) -> None:
        self._running.set(runs)

    def rows(self, tenant: str, rows: int) -> None:
        self._rows.set(rows, tags={"tenant": tenant})

    def ran(self, result: L1RunResult | None, stats: DedupStats) -> None:
        """One pass: ``result`` None when it failed. ``stats`` are the deduper's running totals; what they gained
        since the last pass is counted (passes share one deduper, and a failed pass may have decided some)."""
        self._runs.inc(tags={"result": "ok" if result is not None else "failed"})
        if result is not None:
            for action in ("stored", "updated", "merged", "skipped"):
                _add(self._atoms, getattr(result, action), {"action": action})
        for decision, made in decisions_since(self._seen, stats).items():
            _add(self._gate, made, {"decision": decision})
        self._seen = replace(stats)


class LLMMetrics:
    """Every model call as the engine's usage recorder saw it (``LLMUsage(on_record=...)``), per stage and engine."""

    def __init__(self, engine: str) -> None:
        self._engine = engine
        keys = ("stage", "engine")
        self._calls = Counter("mnemoflow_llm_calls", "Model calls by result", tag_keys=(*keys, "result"))
        self._fallbacks = Counter(
            "mnemoflow_llm_fallbacks", "Items a failed model call left to the heuristic engine", tag_keys=keys
        )
        self._tokens = Counter("mnemoflow_llm_tokens", "Prompt and completion tokens", tag_keys=(*keys, "kind"))
        self._latency = Histogram(
            "mnemoflow_llm_latency_seconds",
            "One call, its validation retry included",
            boundaries=LATENCY_BOUNDARIES_S,
            tag_keys=keys,
        )

    def record(self, call: CallRecord) -> None:
        tags = {"stage": call.stage, "engine": self._engine}
        if call.fallback:
            self._fallbacks.inc(tags=tags)
            return
        self._calls.inc(tags={**tags, "result": "ok" if call.ok else "failed"})
        _add(self._tokens, call.prompt_tokens, {**tags, "kind": "prompt"})
        _add(self._tokens, call.completion_tokens, {**tags, "kind": "completion"})
        self._latency.observe(call.latency_s, tags=tags)

    def record_fallback(self, call: CallRecord) -> None:
        """For the caller's recorder: its call records repeat the engine's (counted there), its fallbacks do not."""
        if call.fallback:
            self.record(call)


class TimedIndex:
    """The atom index with its searches timed (``mnemoflow_index_search_seconds`` by store and method); every other
    call goes to the index untouched. Wrapped where the runtime opens the index (API and extractor replicas)."""

    def __init__(self, index: Any) -> None:
        self._index = index
        self._store = type(index).__name__
        self._latency = Histogram(
            "mnemoflow_index_search_seconds",
            "One search of the atom index",
            boundaries=LATENCY_BOUNDARIES_S,
            tag_keys=("store", "method"),
        )

    def _timed(self, method: str, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return getattr(self._index, method)(*args, **kwargs)
        finally:
            self._latency.observe(time.perf_counter() - started, tags={"store": self._store, "method": method})

    def search(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("search", *args, **kwargs)

    def dense_search(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("dense_search", *args, **kwargs)

    def bm25_search(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("bm25_search", *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)
