"""LoCoMo evidence recall of L1 (heuristic engine) against raw-turn baselines, plus recall latency at 10^5 atoms.

Each LoCoMo conversation is replayed turn by turn into L0, once per speaker (each speaker is a user: their own
turns are ``user`` messages, the other speaker's are ``assistant`` messages). L1 runs when the trigger state
machine says so (warm-up 1, 2, 4, then every 5 user turns; session end at every LoCoMo session end). Every turn
carries its speaker's name, so atoms name their subject. Storage: SQLite vector store; embedder: the default
(multilingual-e5-small) or ``--embedder minilm``.

For each question the top-k of recall over both speakers' atoms (RRF scores of the two per-user searches merged;
a time the question names is resolved against the conversation's last turn, when LoCoMo's questions are asked)
is a hit when some atom's ``source_message_ids`` contains an evidence ``dia_id``; recall@k is the share of
questions with a hit. Baselines in the same run: BM25 (FTS5) and dense search over the raw turns, one row per
turn, its text prefixed with the speaker (``Caroline: ...``), as the atoms are; ``recall_raw`` is the raw turns
searched through recall itself (the hybrid with its time and subject boosts and supersession order), which says
how much of the hybrid's lead is the atoms and how much recall's ranking. ``asked_of_named_speaker`` scores
the same systems when a question that names one speaker is asked of that speaker's memory alone (the raw
baselines then search that speaker's own turns): the per-user way an agent serving that person asks, and in
LoCoMo dev 678 of the 696 questions naming one speaker have an evidence turn said by that speaker. Category mapping
(loaders.LOCOMO_CATEGORIES): 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial; the headline
figures average categories 1-4.

Honest scoring: an atom citing many turns makes a hit easier, so the JSON also has ``source_turns_per_atom`` (mean
source turns of the returned top-10 atoms) and ``recall_at_10_budgeted``: each system's ranked list cut to the
o200k tokens of 10 average raw turns of the conversation (items kept in rank order while they fit).

Model calls a model engine would need (the heuristic engine makes none): one per window with user text, the
extraction call carrying the dedup decisions, plus a judge call for each pass with an open atom (one the
similarity gate could not decide) whose closest candidate was not among the atoms shown in the extraction prompt.

    python bench/locomo_recall.py --quick          # one conversation
    python bench/locomo_recall.py                  # five conversations
    python bench/locomo_recall.py --data bench/data/zh-dialogues.json   # our Chinese set (same format)

Writes ``bench/results/locomo_recall.json``. Data: ``../shared/eval`` (imported by path, never copied).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.recall_scale import WARMUP, recall_ms  # noqa: E402
from bench.report import Run, Table, result_path  # noqa: E402
from bench.store_latency import Corpus  # noqa: E402
from mnemoflow.config import Settings  # noqa: E402
from mnemoflow.embedding.factory import build_embedder
from mnemoflow.events import TurnEvent
from mnemoflow.index.sqlite import SqliteVectorStore
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1.dedup import DedupConfig
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.pipeline import L1Pipeline, L1Settings
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.l1.triggers import L1Triggers, TriggerState
from mnemoflow.memory.recall.config import RECIPES, search_hits
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.ports import Embedder
from mnemoflow.ports.vectors import AtomRow
from mnemoflow.prompts import l1_extraction
from mnemoflow.storage import LocalFileStore
from mnemoflow.tokens import count_tokens

ROOT = Path(__file__).resolve().parent.parent
TENANT = "locomo"
KS = (5, 10)
BUDGET_TURNS = 10
SYSTEMS = ["hybrid", "bm25_raw", "dense_raw", "hybrid_raw", "recall_raw", "bm25_atoms", "dense_atoms"]


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
    """A safe user id per speaker; names the pattern would mangle (李娜, 王磊 both become ``__``) get a digest."""
    safe = re.sub(r"[^A-Za-z0-9_.:@-]", "_", speaker)
    if safe != speaker:
        safe += "-" + hashlib.sha256(speaker.encode()).hexdigest()[:8]
    return f"{sample}.{safe}"


def turn_time(turn: dict[str, Any]) -> datetime:
    base = (
        datetime.fromisoformat(turn["timestamp"]).replace(tzinfo=UTC)
        if turn["timestamp"]
        else datetime(2020, 1, 1, tzinfo=UTC)
    )
    return base + timedelta(seconds=30 * turn["turn_index"])  # LoCoMo has per-session times only


async def ingest(
    conv: dict[str, Any],
    files: LocalFileStore,
    pipeline: L1Pipeline,
    clock: TurnClock,
    counters: dict[str, int],
    agent_of: Callable[[dict[str, Any]], str | None] | None = None,
) -> None:
    """Replay one conversation into both speakers' L0, running L1 when the trigger machine decides.

    ``agent_of``: the agent that hears a turn, stamped on its events in both speakers' memories (bench/agents.py
    splits a conversation over two agents); None: no agent, as before scopes."""
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
        text = turn_content(turn)
        for speaker, user in users.items():
            role = "user" if speaker == turn["speaker"] else "assistant"
            writer.write(
                [
                    TurnEvent(
                        tenant=TENANT,
                        message_id=turn["dia_id"],
                        user=user,
                        session=f"s{session}",
                        role=role,
                        content=text,
                        ts=clock.t,
                        name=turn["speaker"],
                        agent=agent_of(turn) if agent_of else None,
                    )
                ]
            )
        counters["turns"] += 1
        speaker_user = users[turn["speaker"]]
        states[speaker_user], d = triggers.on_turn(states[speaker_user], clock.now())
        await run(speaker_user, d)
    for user in users.values():
        states[user], d = triggers.on_session_end(states[user], clock.now())
        await run(user, d)


def heuristic_pipeline(
    files: LocalFileStore, store: SqliteVectorStore, embedder: Embedder, clock: TurnClock, **options: Any
) -> L1Pipeline:
    """The L1 pipeline of the heuristic engine, as the benchmarks run it; ``options``: ``dedup``, ``settings``."""
    return L1Pipeline(
        files=files,
        store=store,
        embedder=embedder,
        extractor=HeuristicExtractor(),
        judge=HeuristicJudge(),
        clock=clock,
        **options,
    )


def workspace(
    work: Path, embedder: Embedder
) -> tuple[LocalFileStore, SqliteVectorStore, SqliteVectorStore, SqliteVectorStore]:
    """The files of one run and its indexes: the atoms (L1), the raw turns by conversation and by speaker (the
    baselines; apart, so that BM25's statistics of each are those of one copy of every turn)."""
    files = LocalFileStore(work / "data")
    store, raw, own = (
        SqliteVectorStore.open(str(work / name), dim=embedder.dim, embedding_model=embedder.model_id)
        for name in ("atoms.sqlite", "raw.sqlite", "raw-own.sqlite")
    )
    return files, store, raw, own


def turn_content(turn: dict[str, Any]) -> str:
    """A turn's text as L0 holds it, with the photo caption LoCoMo gives."""
    return turn["text"] + (f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else "")


def speaker_events(tenant: str, user: str, speaker: str, turns: list[dict[str, Any]]) -> list[TurnEvent]:
    """LoCoMo turns as the events of one speaker's memory: that speaker is the ``user``, the other the assistant."""
    return [
        TurnEvent(
            tenant=tenant,
            message_id=t["dia_id"],
            user=user,
            session=f"s{t['session']}",
            role="user" if t["speaker"] == speaker else "assistant",
            content=turn_content(t),
            ts=turn_time(t),
            name=t["speaker"],
        )
        for t in turns
    ]


def raw_text(turn: dict[str, Any]) -> str:
    """A raw turn as the baselines index it: named like an atom."""
    return f"{turn['speaker']}: {turn_content(turn)}"


def raw_rows(conv: dict[str, Any], embedder: Embedder) -> tuple[list[AtomRow], list[AtomRow]]:
    """Every turn under the conversation's scope (``sample_id``), and the same rows under their speaker's user id:
    the scope a question asked of one speaker searches (see :func:`evaluate`). One embedding per turn."""
    texts = [raw_text(t) for t in conv["turns"]]
    vecs = embedder.embed(texts)
    rows = [
        AtomRow(
            id=t["dia_id"],
            tenant="raw",
            user=conv["sample_id"],
            type="episodic",
            priority=50,
            text=text or "(empty)",
            vector=v,
            created=turn_time(t),
            updated=turn_time(t),
            source_message_ids=[t["dia_id"]],
        )
        for t, text, v in zip(conv["turns"], texts, vecs, strict=True)
    ]
    own = [
        row.model_copy(update={"user": uid(conv["sample_id"], t["speaker"])})
        for t, row in zip(conv["turns"], rows, strict=True)
    ]
    return rows, own


def duplicate_rate(files: LocalFileStore, store: SqliteVectorStore, users: list[str], near: float) -> tuple[float, int]:
    """Share of live atoms that repeat an earlier atom of the same user (same type, cosine ≥ ``near`` or same text).

    ``near`` is the embedder's own duplicate level (0.95 for MiniLM; cosine scales differ between models)."""
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
            if any(rows[j].type == r.type and (sims[i, j] >= near or rows[j].text == r.text) for j in range(i)):
                dup += 1
    return (dup / total if total else 0.0), total


def evidence_by_speaker(conv: dict[str, Any]) -> dict[str, list[str]]:
    """The evidence turns of questions in categories 1-4, under the speaker who said them (whose memory must hold
    them: each speaker is a user)."""
    speaker = {t["dia_id"]: t["speaker"] for t in conv["turns"]}
    wanted = sorted({e for q in conv["qa"] if q["category"] in (1, 2, 3, 4) for e in q["evidence"] if e in speaker})
    return {name: [e for e in wanted if speaker[e] == name] for name in (conv["speaker_a"], conv["speaker_b"])}


def without_atom(evidence: int, missed: list[str]) -> dict[str, Any]:
    """How many evidence turns no atom cites, and which (ids only: the eval text stays in ../shared/eval)."""
    share = round(len(missed) / evidence, 4) if evidence else 0.0
    return {"evidence_turns": evidence, "without_atom": len(missed), "share_without_atom": share, "missed": missed}


def evidence_without_atom(convs: list[dict[str, Any]], files: LocalFileStore) -> dict[str, Any]:
    """Evidence turns that no live atom of their speaker's memory cites, after dedup: what recall over atoms cannot
    find at any k (``bench/evidence_atoms.py`` counts the same before dedup)."""
    evidence, missed = 0, []
    for conv in convs:
        for name, mine in evidence_by_speaker(conv).items():
            log = RecordLog(files, TENANT, uid(conv["sample_id"], name))
            cited = {m for r in log.read() for m in r.source_message_ids}
            evidence += len(mine)
            missed += [f"{conv['sample_id']}:{e}" for e in mine if e not in cited]
    return without_atom(evidence, missed)


def within(items: list[tuple[str, list[str]]], budget: int) -> list[tuple[str, list[str]]]:
    """The ranked items that fit in ``budget`` tokens, in rank order (an item that does not fit ends the list)."""
    kept, used = [], 0
    for text, sources in items:
        used += count_tokens(text)
        if used > budget:
            break
        kept.append((text, sources))
    return kept


def named_speakers(conv: dict[str, Any], question: str) -> list[str]:
    """The conversation's speakers a question names (a whole word; Chinese names as written)."""
    return [
        s
        for s in (conv["speaker_a"], conv["speaker_b"])
        if re.search(rf"(?<![A-Za-z]){re.escape(s)}(?![A-Za-z])", question)
    ]


def ranked(
    recaller: Recaller,
    raw: SqliteVectorStore,
    users: list[str],
    raw_scope: str,
    question: str,
    vec: list[float],
    now: datetime,
) -> dict[str, list[tuple[str, list[str]]]]:
    """Every system's ranked (text, source ids), deeper than k: the budgeted list may hold more short atoms."""
    depth = 3 * max(KS)
    out: dict[str, list[tuple[str, list[str]]]] = {}
    for name, cfg in (
        ("hybrid", RECIPES["hybrid_rrf"]),
        ("bm25_atoms", RECIPES["bm25"]),
        ("dense_atoms", RECIPES["vector"].model_copy(update={"min_vector_score": -1.0})),
    ):
        both = [h for u in users for h in recaller.hits(TENANT, u, question, vec, cfg, depth, now)]
        both.sort(key=lambda h: -h.score)  # RRF scores of the per-user searches, merged
        out[name] = [(h.row.text, h.row.source_message_ids) for h in both]
    for name, found in (
        ("bm25_raw", raw.bm25_search("raw", raw_scope, question, depth)),
        ("dense_raw", raw.dense_search("raw", raw_scope, vec, depth)),
        ("hybrid_raw", raw.search("raw", raw_scope, question, vec, depth)),
        ("recall_raw", search_hits(raw, "raw", raw_scope, question, vec, RECIPES["hybrid_rrf"], depth, now)),
    ):
        out[name] = [(h.row.text, h.row.source_message_ids) for h in found]
    return out


def evaluate(
    convs: list[dict[str, Any]],
    recaller: Recaller,
    raw: SqliteVectorStore,
    own: SqliteVectorStore,
    embedder: Embedder,
) -> dict[str, Any]:
    """Recall under two ways of asking, in one pass.

    Both memories (the headline, as in every earlier release): each question searches both speakers' atoms, the
    two per-user RRF lists merged by score, against the raw baselines over all turns. Named speaker: a question
    that names exactly one speaker is asked of that speaker's memory alone, as an agent serving that person would
    ask, and the raw baselines search that speaker's own turns, so both sides get the same prior (the atoms hold
    only what their user said); a question naming both or neither is asked as before."""
    keys = [*(f"at_{k}" for k in KS), "budgeted"]
    protocols = ("both", "named")
    hits: dict[str, dict[str, dict[str, dict[int, list[int]]]]] = {
        p: {s: {key: {} for key in keys} for s in SYSTEMS} for p in protocols
    }
    sources_per_atom: list[int] = []
    query_ms: list[float] = []
    routed = 0
    for conv in convs:
        sid = conv["sample_id"]
        qa = [q for q in conv["qa"] if q["evidence"]]
        budget = round(BUDGET_TURNS * statistics.mean(count_tokens(raw_text(t)) for t in conv["turns"]))
        t0 = time.perf_counter()
        qvecs = embedder.embed_query([q["question"] for q in qa])
        now = turn_time(conv["turns"][-1])
        query_ms.append((time.perf_counter() - t0) * 1000 / max(1, len(qa)))
        for q, vec in zip(qa, qvecs, strict=True):
            ev = set(q["evidence"])
            both_users = [uid(sid, s) for s in (conv["speaker_a"], conv["speaker_b"])]
            named = named_speakers(conv, q["question"])
            asked = {"both": ranked(recaller, raw, both_users, sid, q["question"], vec, now)}
            if len(named) == 1:
                routed += q["category"] in (1, 2, 3, 4)
                one = uid(sid, named[0])
                asked["named"] = ranked(recaller, own, [one], one, q["question"], vec, now)
            else:
                asked["named"] = asked["both"]
            sources_per_atom += [len(src) for _, src in asked["both"]["hybrid"][: max(KS)]]
            for p in protocols:
                for s in SYSTEMS:
                    for key, items in ((f"at_{k}", asked[p][s][:k]) for k in KS):
                        hit = int(any(ev & set(src) for _, src in items))
                        hits[p][s][key].setdefault(q["category"], []).append(hit)
                    kept = within(asked[p][s], budget)
                    hits[p][s]["budgeted"].setdefault(q["category"], []).append(
                        int(any(ev & set(src) for _, src in kept))
                    )

    def table(h: dict[str, dict[str, dict[int, list[int]]]], key: str) -> dict[str, Any]:
        row: dict[str, Any] = {
            s: round(statistics.mean([x for c in (1, 2, 3, 4) for x in h[s][key].get(c, [])]), 4) for s in SYSTEMS
        }
        row["by_category"] = {
            str(c): {s: round(statistics.mean(h[s][key][c]), 4) for s in SYSTEMS} for c in sorted(h["hybrid"][key])
        }
        return row

    def name(key: str) -> str:
        return "recall_at_10_budgeted" if key == "budgeted" else f"recall_{key}"

    out: dict[str, Any] = {name(key): table(hits["both"], key) for key in keys}
    out["asked_of_named_speaker"] = {
        **{name(key): table(hits["named"], key) for key in keys},
        "questions_asked_of_one_speaker": routed,
        "how": "a question naming exactly one speaker searches that speaker's atoms, and the raw baselines that "
        "speaker's own turns; the others are asked of both, as in the headline figures",
    }
    out["source_turns_per_atom"] = {
        "hybrid": round(statistics.mean(sources_per_atom), 3) if sources_per_atom else 0.0,
        "bm25_raw": 1.0,
        "dense_raw": 1.0,
    }
    out["budget"] = f"{BUDGET_TURNS} raw turns' o200k tokens (mean turn length per conversation)"
    out["query_embedding_ms"] = round(statistics.mean(query_ms), 2)
    out["questions"] = {str(c): len(v) for c, v in sorted(hits["both"]["hybrid"]["at_10"].items())}
    return out


def latency(n_atoms: int, n_users: int, queries: int, workdir: Path) -> dict[str, Any]:
    """Server-side recall (hybrid search + rendering, no query embedding) at ``n_atoms`` synthetic atoms: the SQLite
    case of ``bench/recall_scale.py``, which also times Milvus, 10^6 atoms and the index build."""
    corpus = Corpus(n_atoms, n_users, 384)
    store = SqliteVectorStore.open(str(workdir / "latency.sqlite"), dim=384, embedding_model="synthetic-384")
    for batch in corpus.batches():
        store.upsert(batch)
    ms = recall_ms(store, corpus.queries(queries + WARMUP), workdir / "files")
    store.close()
    q = np.percentile(ms, [50, 99])
    return {
        "p50": round(float(q[0]), 2),
        "p99": round(float(q[1]), 2),
        "atoms": n_atoms,
        "users": n_users,
        "queries": queries,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one conversation")
    ap.add_argument("--eval-dir", default=str(ROOT.parent / "shared" / "eval"))
    ap.add_argument("--latency-atoms", type=int, default=100_000)
    ap.add_argument("--latency-users", type=int, default=1_000)
    ap.add_argument("--latency-queries", type=int, default=500)
    ap.add_argument(
        "--store-below",
        type=float,
        help="dedup gate: best cosine below this stores without a judgement (default: the embedder's)",
    )
    ap.add_argument("--data", help="conversations in LoCoMo's format (default: the eval set's locomo-dev.json)")
    ap.add_argument("--embedder", choices=["e5", "minilm"], default=Settings().embedder)
    ap.add_argument("--no-latency", action="store_true", help="skip the 10^5-atom latency run")
    ap.add_argument("--out", help="default bench/results/locomo_recall.json, or locomo_recall-<data>.json")
    args = ap.parse_args()
    loaders = load_module(Path(args.eval_dir) / "loaders.py", "mnemoflow_eval_loaders")
    data = Path(args.data) if args.data else Path(args.eval_dir) / "locomo" / "locomo-dev.json"
    out = result_path(f"locomo_recall{f'-{data.stem}' if args.data else ''}", args.out, quick=args.quick)
    convs = loaders.load_locomo(str(data))
    convs = convs[:1] if args.quick else convs
    run = Run("locomo_recall", f"Evidence recall on {data.stem}: L1 atoms (heuristic) against raw-turn baselines")
    embedder = build_embedder(Settings(embedder=args.embedder))
    counters = {"turns": 0, "passes": 0, "llm_calls": 0, "model_calls_needed": 0}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mnemoflow-locomo-") as tmp:
        work = Path(tmp)
        files, store, raw, own = workspace(work, embedder)
        clock = TurnClock()
        pipeline = heuristic_pipeline(
            files,
            store,
            embedder,
            clock,
            dedup=DedupConfig.for_model(embedder.model_id).model_copy(
                update={} if args.store_below is None else {"store_below": args.store_below}
            ),
            settings=L1Settings(count_model_calls=True),
        )
        for conv in convs:
            asyncio.run(ingest(conv, files, pipeline, clock, counters))
            rows, mine = raw_rows(conv, embedder)
            raw.upsert(rows)
            own.upsert(mine)
        ingest_s = time.perf_counter() - t0
        recaller = Recaller(store=store, embedder=embedder, files=files)
        result = evaluate(convs, recaller, raw, own, embedder)
        users = [uid(c["sample_id"], s) for c in convs for s in (c["speaker_a"], c["speaker_b"])]
        # e5's scale is compressed: its skip gate 0.978 matches MiniLM's 0.92 (DedupConfig.for_model), so MiniLM's
        # 0.95 is taken as 0.985 for e5 (an extrapolation past the measured quantiles, stated as such).
        near = 0.985 if embedder.model_id.startswith("multilingual-e5") else 0.95
        dup, atoms = duplicate_rate(files, store, users, near)
        uncited = evidence_without_atom(convs, files)
        lat = None if args.no_latency else latency(args.latency_atoms, args.latency_users, args.latency_queries, work)
    stats = pipeline.deduper.stats
    extraction_windows = counters["model_calls_needed"] - stats.model_judge_passes
    result.update(
        {
            "engine": "heuristic",
            "embedder": embedder.model_id,
            "store": "sqlite",
            "conversations": [c["sample_id"] for c in convs],
            "turns": counters["turns"],
            "atoms": atoms,
            "category_mapping": {
                "1": "multi-hop",
                "2": "temporal",
                "3": "open-domain",
                "4": "single-hop",
                "5": "adversarial",
            },
            "hit_definition": "a question counts when any top-k atom's source_message_ids holds an evidence dia_id",
            "latency_ms": lat,
            "llm_calls_per_100_turns": round(100 * counters["llm_calls"] / counters["turns"], 2),
            "model_calls_per_100_turns_if_model_engine": round(
                100 * counters["model_calls_needed"] / counters["turns"], 2
            ),
            "model_calls_breakdown": {
                "design": f"{l1_extraction.VERSION}: one call per window with user text (extraction with the dedup "
                "decisions folded in) + a judge call for passes with an open atom whose closest candidate "
                "was not shown in the extraction prompt (assumes the model decides every memory it was "
                "shown candidates for, as the prompt asks)",
                "extraction_windows": extraction_windows,
                "judge_passes_still_needed": stats.model_judge_passes,
                "per_100_turns_if_model_left_every_open_atom_undecided": round(
                    100 * (extraction_windows + stats.judge_passes) / counters["turns"], 2
                ),
            },
            "l1_passes": counters["passes"],
            "dedup": {
                "config": pipeline.deduper.config.model_dump(),
                "gated_skip": stats.gated_skip,
                "gated_store": stats.gated_store,
                "judged": stats.judged,
                "judge_passes": stats.judge_passes,
                "judge_calls_saved": stats.judge_calls_saved,
                "model_judge_passes": stats.model_judge_passes,
                "actions": stats.actions,
            },
            "duplicate_rate": round(dup, 4),
            "evidence_turns_without_atom": uncited,
            "duplicate_cosine": near,
            "ingest_and_extract_s": round(ingest_s, 1),
            "data": str(data.name),
        }
    )
    run.finish(tables(result), result, out, notes=notes(result))


def tables(result: dict[str, Any]) -> list[Table]:
    """Recall per system, asked of both memories and of the named speaker's, with each category at 10."""
    out = []
    named = result["asked_of_named_speaker"]
    for title, table in (("asked of both speakers' memories", result), ("asked of the named speaker's memory", named)):
        cats = table["recall_at_10"]["by_category"]
        names = result["category_mapping"]
        rows = [
            [
                system,
                f"{table['recall_at_5'][system]:.3f}",
                f"{table['recall_at_10'][system]:.3f}",
                f"{table['recall_at_10_budgeted'][system]:.3f}",
                *(f"{v[system]:.3f}" for v in cats.values()),
            ]
            for system in SYSTEMS
        ]
        columns = ["system", "R@5", "R@10", "R@10 at equal tokens", *(f"{names.get(c, c)} @10" for c in cats)]
        out.append(Table(title=f"Evidence recall, {title}", columns=columns, rows=rows))
    lat = result["latency_ms"]
    if lat:
        out.append(
            Table(
                title="Hybrid recall latency (no query embedding)",
                columns=["atoms", "p50 ms", "p99 ms"],
                rows=[[f"{lat['atoms']:,}", str(lat["p50"]), str(lat["p99"])]],
            )
        )
    return out


def notes(result: dict[str, Any]) -> list[str]:
    b, uncited = result["model_calls_breakdown"], result["evidence_turns_without_atom"]
    return [
        f"{result['data']}: {len(result['conversations'])} conversations, {result['turns']} turns, {result['atoms']}"
        f" atoms; engine heuristic, {result['embedder']} + SQLite; query embedding {result['query_embedding_ms']} ms"
        " per question",
        f"source turns per returned atom (hybrid top 10): {result['source_turns_per_atom']['hybrid']}",
        f"LLM calls per 100 turns: {result['llm_calls_per_100_turns']}; a model engine would need"
        f" {result['model_calls_per_100_turns_if_model_engine']} ({b['extraction_windows']} extraction calls +"
        f" {b['judge_passes_still_needed']} judge calls); duplicate rate {result['duplicate_rate']}",
        f"evidence turns no live atom cites: {uncited['without_atom']} / {uncited['evidence_turns']}"
        f" ({uncited['share_without_atom']:.1%})",
    ]


if __name__ == "__main__":
    main()
