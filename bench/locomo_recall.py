"""LoCoMo evidence recall of L1 (heuristic engine) against raw-turn baselines, plus recall latency at 10^5 atoms.

Each LoCoMo conversation is replayed turn by turn into L0, once per speaker (each speaker is a user: their own
turns are ``user`` messages, the other speaker's are ``assistant`` messages). L1 runs when the trigger state
machine says so (warm-up 1, 2, 4, then every 5 user turns; session end at every LoCoMo session end). Storage:
SQLite vector store, MiniLM (int8 ONNX) embedder.

For each question the top-k of recall over both speakers' atoms (RRF scores of the two per-user searches merged)
is a hit when some atom's ``source_message_ids`` contains an evidence ``dia_id``; recall@k is the share of
questions with a hit. Baselines in the same run: BM25 (FTS5) and dense search over the raw turns, one row per
turn. Category mapping (loaders.LOCOMO_CATEGORIES): 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
5 adversarial; the headline figures average categories 1-4.

Model calls a model engine would need (the heuristic engine makes none): one per window with user text, the
extraction call carrying the dedup decisions, plus a judge call for each pass with an open atom (one the
similarity gate could not decide) whose closest candidate was not among the atoms shown in the extraction prompt.

    python bench/locomo_recall.py --quick          # one conversation
    python bench/locomo_recall.py                  # five conversations

Writes ``bench/results/locomo_recall.json``. Data: ``../shared/eval`` (imported by path, never copied).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import platform
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from mnemoflow.embedding import MiniLMEmbedder
from mnemoflow.events import TurnEvent
from mnemoflow.memory.dedup import DedupConfig
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1_heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1_pipeline import L1Pipeline, L1Settings
from mnemoflow.memory.recall import Recaller
from mnemoflow.memory.recall_config import RECIPES
from mnemoflow.memory.records import RecordLog
from mnemoflow.memory.triggers import L1Triggers, TriggerState
from mnemoflow.ports.vectors import AtomRow
from mnemoflow.prompts import l1_extraction
from mnemoflow.storage import LocalFileStore
from mnemoflow.stores.sqlite import SqliteVectorStore

ROOT = Path(__file__).resolve().parent.parent
TENANT = "locomo"
KS = (5, 10)


def load_module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class TurnClock:
    """The clock of the replay: the time of the turn being ingested."""

    def __init__(self) -> None:
        self.t = datetime(2020, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.t


def uid(sample: str, speaker: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:@-]", "_", f"{sample}.{speaker}")


def turn_time(turn: dict[str, Any]) -> datetime:
    base = datetime.fromisoformat(turn["timestamp"]).replace(tzinfo=UTC) if turn["timestamp"] else datetime(
        2020, 1, 1, tzinfo=UTC)
    return base + timedelta(seconds=30 * turn["turn_index"])  # LoCoMo has per-session times only


async def ingest(conv: dict[str, Any], files: LocalFileStore, pipeline: L1Pipeline, clock: TurnClock,
                 counters: dict[str, int]) -> None:
    """Replay one conversation into both speakers' L0, running L1 when the trigger machine decides."""
    triggers = L1Triggers()
    users = {s: uid(conv["sample_id"], s) for s in (conv["speaker_a"], conv["speaker_b"])}
    states = {u: TriggerState() for u in users.values()}
    writer = L0Writer(files)

    async def run(user: str, decision: Any) -> None:
        if not decision.run:
            return
        result = await pipeline.run(TENANT, user)
        counters["passes"] += 1
        counters["llm_calls"] += result.llm_calls
        counters["model_calls_needed"] += result.model_calls_needed
        states[user], again = triggers.on_success(states[user], clock.now())
        await run(user, again)

    session = None
    for turn in conv["turns"]:
        if session is not None and turn["session"] != session:
            for user in users.values():
                states[user], d = triggers.on_session_end(states[user], clock.now())
                await run(user, d)
        session = turn["session"]
        clock.t = turn_time(turn)
        text = turn["text"] + (f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else "")
        for speaker, user in users.items():
            role = "user" if speaker == turn["speaker"] else "assistant"
            writer.write([TurnEvent(tenant=TENANT, message_id=turn["dia_id"], user=user, session=f"s{session}",
                                    role=role, content=text, ts=clock.t)])
        counters["turns"] += 1
        speaker_user = users[turn["speaker"]]
        states[speaker_user], d = triggers.on_turn(states[speaker_user], clock.now())
        await run(speaker_user, d)
    for user in users.values():
        states[user], d = triggers.on_session_end(states[user], clock.now())
        await run(user, d)


def raw_rows(conv: dict[str, Any], embedder: MiniLMEmbedder) -> list[AtomRow]:
    texts = [t["text"] + (f" [shares a photo: {t['blip_caption']}]" if t.get("blip_caption") else "")
             for t in conv["turns"]]
    vecs = embedder.embed(texts)
    return [AtomRow(id=t["dia_id"], tenant="raw", user=conv["sample_id"], type="episodic", priority=50,
                    text=text or "(empty)", vector=v, created=turn_time(t), updated=turn_time(t),
                    source_message_ids=[t["dia_id"]]) for t, text, v in zip(conv["turns"], texts, vecs, strict=True)]


def duplicate_rate(files: LocalFileStore, store: SqliteVectorStore, users: list[str]) -> tuple[float, int]:
    """Share of live atoms that repeat an earlier atom of the same user (same type, cosine ≥ 0.95 or same text)."""
    dup = total = 0
    for user in users:
        ids = [r.id for r in RecordLog(files, TENANT, user).read()]
        rows = store.get(TENANT, user, ids)
        if not rows:
            continue
        m = np.array([r.vector for r in rows], dtype=np.float32)
        sims = m @ m.T
        for i, r in enumerate(rows):
            total += 1
            if any(rows[j].type == r.type and (sims[i, j] >= 0.95 or rows[j].text == r.text) for j in range(i)):
                dup += 1
    return (dup / total if total else 0.0), total


def evaluate(convs: list[dict[str, Any]], recaller: Recaller, raw: SqliteVectorStore,
             embedder: MiniLMEmbedder) -> dict[str, Any]:
    systems = ["hybrid", "bm25_raw", "dense_raw", "hybrid_raw", "bm25_atoms", "dense_atoms"]
    hits: dict[str, dict[int, dict[int, list[int]]]] = {s: {k: {} for k in KS} for s in systems}
    kmax = max(KS)
    for conv in convs:
        users = [uid(conv["sample_id"], s) for s in (conv["speaker_a"], conv["speaker_b"])]
        qa = [q for q in conv["qa"] if q["evidence"]]
        qvecs = embedder.embed([q["question"] for q in qa])
        for q, vec in zip(qa, qvecs, strict=True):
            ev = set(q["evidence"])
            ranked: dict[str, list[list[str]]] = {}
            for name, cfg in (("hybrid", RECIPES["hybrid_rrf"]), ("bm25_atoms", RECIPES["bm25"]),
                              ("dense_atoms", RECIPES["vector"].model_copy(update={"min_vector_score": -1.0}))):
                both = [h for u in users for h in recaller.hits(TENANT, u, q["question"], vec, cfg, kmax)]
                both.sort(key=lambda h: -h.score)
                ranked[name] = [h.row.source_message_ids for h in both[:kmax]]
            sid = conv["sample_id"]
            ranked["bm25_raw"] = [h.row.source_message_ids for h in raw.bm25_search("raw", sid, q["question"], kmax)]
            ranked["dense_raw"] = [h.row.source_message_ids for h in raw.dense_search("raw", sid, vec, kmax)]
            ranked["hybrid_raw"] = [h.row.source_message_ids for h in raw.search("raw", sid, q["question"], vec, kmax)]
            for s in systems:
                for k in KS:
                    hit = any(ev & set(src) for src in ranked[s][:k])
                    hits[s][k].setdefault(q["category"], []).append(int(hit))
    out: dict[str, Any] = {}
    for k in KS:
        key = f"recall_at_{k}"
        out[key] = {s: round(statistics.mean([x for c in (1, 2, 3, 4) for x in hits[s][k].get(c, [])]), 4)
                    for s in systems}
        out[key]["by_category"] = {str(c): {s: round(statistics.mean(hits[s][k][c]), 4) for s in systems}
                                   for c in sorted(hits["hybrid"][k])}
    out["questions"] = {str(c): len(v) for c, v in sorted(hits["hybrid"][kmax].items())}
    return out


def latency(n_atoms: int, n_users: int, queries: int, workdir: Path) -> dict[str, Any]:
    """Server-side recall (hybrid search + rendering, no query embedding) at ``n_atoms`` synthetic atoms."""
    corpus_mod = load_module(ROOT / "bench" / "store_latency.py", "store_latency_bench")
    corpus = corpus_mod.Corpus(n_atoms, n_users, 384)
    store = SqliteVectorStore.open(str(workdir / "latency.sqlite"), dim=384, embedding_model="synthetic-384")
    for batch in corpus.batches():
        store.upsert(batch)
    recaller = Recaller(store=store, embedder=None, files=LocalFileStore(workdir / "files"))  # type: ignore[arg-type]
    ms = []
    for i, (user, text, vec) in enumerate(corpus.queries(queries + 20)):
        t0 = time.perf_counter()
        recaller.recall_sync("bench", user, text, vec, RECIPES["hybrid_rrf"].model_copy(update={"k": 10}))
        if i >= 20:
            ms.append((time.perf_counter() - t0) * 1000)
    store.close()
    q = np.percentile(ms, [50, 99])
    return {"p50": round(float(q[0]), 2), "p99": round(float(q[1]), 2), "atoms": n_atoms, "users": n_users,
            "queries": queries}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one conversation")
    ap.add_argument("--eval-dir", default=str(ROOT.parent / "shared" / "eval"))
    ap.add_argument("--latency-atoms", type=int, default=100_000)
    ap.add_argument("--latency-users", type=int, default=1_000)
    ap.add_argument("--latency-queries", type=int, default=500)
    ap.add_argument("--store-below", type=float, default=DedupConfig().store_below,
                    help="dedup gate: best cosine below this stores without a judgement")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "locomo_recall.json"))
    args = ap.parse_args()
    loaders = load_module(Path(args.eval_dir) / "loaders.py", "mnemoflow_eval_loaders")
    convs = loaders.load_locomo(str(Path(args.eval_dir) / "locomo" / "locomo-dev.json"))
    convs = convs[:1] if args.quick else convs
    embedder = MiniLMEmbedder()
    counters = {"turns": 0, "passes": 0, "llm_calls": 0, "model_calls_needed": 0}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mnemoflow-locomo-") as tmp:
        work = Path(tmp)
        files = LocalFileStore(work / "data")
        store = SqliteVectorStore.open(str(work / "atoms.sqlite"), dim=embedder.dim, embedding_model=embedder.model_id)
        raw = SqliteVectorStore.open(str(work / "raw.sqlite"), dim=embedder.dim, embedding_model=embedder.model_id)
        clock = TurnClock()
        pipeline = L1Pipeline(files=files, store=store, embedder=embedder, extractor=HeuristicExtractor(),
                              judge=HeuristicJudge(), clock=clock,
                              dedup=DedupConfig(store_below=args.store_below),
                              settings=L1Settings(count_model_calls=True))
        for conv in convs:
            asyncio.run(ingest(conv, files, pipeline, clock, counters))
            raw.upsert(raw_rows(conv, embedder))
        ingest_s = time.perf_counter() - t0
        recaller = Recaller(store=store, embedder=embedder, files=files)
        result = evaluate(convs, recaller, raw, embedder)
        users = [uid(c["sample_id"], s) for c in convs for s in (c["speaker_a"], c["speaker_b"])]
        dup, atoms = duplicate_rate(files, store, users)
        lat = latency(args.latency_atoms, args.latency_users, args.latency_queries, work)
    stats = pipeline.deduper.stats
    extraction_windows = counters["model_calls_needed"] - stats.model_judge_passes
    result.update({
        "engine": "heuristic", "embedder": embedder.model_id, "store": "sqlite",
        "conversations": [c["sample_id"] for c in convs], "turns": counters["turns"], "atoms": atoms,
        "category_mapping": {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop",
                             "5": "adversarial"},
        "hit_definition": "a question counts when any top-k atom's source_message_ids holds an evidence dia_id",
        "latency_ms": lat,
        "llm_calls_per_100_turns": round(100 * counters["llm_calls"] / counters["turns"], 2),
        "model_calls_per_100_turns_if_model_engine": round(
            100 * counters["model_calls_needed"] / counters["turns"], 2),
        "model_calls_breakdown": {
            "design": f"{l1_extraction.VERSION}: one call per window with user text (extraction with the dedup "
                      "decisions folded in) + a judge call for passes with an open atom whose closest candidate "
                      "was not shown in the extraction prompt (assumes the model decides every memory it was "
                      "shown candidates for, as the prompt asks)",
            "extraction_windows": extraction_windows,
            "judge_passes_still_needed": stats.model_judge_passes,
            "per_100_turns_if_model_left_every_open_atom_undecided": round(
                100 * (extraction_windows + stats.judge_passes) / counters["turns"], 2)},
        "l1_passes": counters["passes"],
        "dedup": {"config": pipeline.deduper.config.model_dump(), "gated_skip": stats.gated_skip,
                  "gated_store": stats.gated_store, "judged": stats.judged,
                  "judge_passes": stats.judge_passes, "judge_calls_saved": stats.judge_calls_saved,
                  "model_judge_passes": stats.model_judge_passes,
                  "actions": stats.actions},
        "duplicate_rate": round(dup, 4), "ingest_and_extract_s": round(ingest_s, 1),
        "command": "python bench/locomo_recall.py" + (" --quick" if args.quick else ""),
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
    })
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"LoCoMo {len(convs)} conv, {counters['turns']} turns, {atoms} atoms, engine heuristic, MiniLM + SQLite")
    cats = result["recall_at_10"]["by_category"]
    print(f"{'system':12} {'R@5':>7} {'R@10':>7}  " + "  ".join(f"c{c}@10" for c in cats))
    for s in ("hybrid", "bm25_raw", "dense_raw", "hybrid_raw", "bm25_atoms", "dense_atoms"):
        cats = "  ".join(f"{v[s]:6.3f}" for v in result["recall_at_10"]["by_category"].values())
        print(f"{s:12} {result['recall_at_5'][s]:7.3f} {result['recall_at_10'][s]:7.3f}  {cats}")
    print(f"latency (hybrid recall, {lat['atoms']} atoms, no query embedding): "
          f"p50 {lat['p50']} ms, p99 {lat['p99']} ms")
    b = result["model_calls_breakdown"]
    print(f"LLM calls/100 turns: {result['llm_calls_per_100_turns']} (a model engine would need "
          f"{result['model_calls_per_100_turns_if_model_engine']}: {b['extraction_windows']} extraction calls + "
          f"{b['judge_passes_still_needed']} judge calls; {b['per_100_turns_if_model_left_every_open_atom_undecided']}"
          f" if the model decided nothing); duplicate rate {result['duplicate_rate']}")


if __name__ == "__main__":
    main()
