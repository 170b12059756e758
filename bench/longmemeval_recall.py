"""LongMemEval-S evidence recall of L1 (heuristic engine) against raw-turn baselines, per question type.

Each item of ``../shared/eval/longmemeval/longmemeval-s-dev.json`` is one question with its own history of about
50 timestamped sessions, so each is its own user. Its sessions are replayed in order into L0 (message ids
``<session id>-<turn index>``, times from ``haystack_dates``, 30 s apart), L1 runs when the trigger state machine
says so (session end at every session end), exactly as ``bench/locomo_recall.py`` does for LoCoMo.

Measured, for the hybrid over atoms and, in the same run, BM25 / dense / hybrid over raw turns (every turn of the
history one row, user and assistant alike):

* ``turn_recall_at_10``: a hit when one of the top 10 cites a turn marked ``has_answer``; also
  ``turn_recall_at_10_budgeted``: each ranked list cut to the o200k tokens of 10 average raw turns of that history
  (an atom that cites many turns or runs long cannot buy its hit with length);
* ``session_recall_at_5``: a hit when one of the top 5 comes from an ``answer_session_ids`` session.

Recall is asked at the question's ``question_date``, so "four weeks ago" in a question means four weeks before it.

Each figure is averaged over the questions that have evidence turns and is reported per ``question_type``. The
heuristic engine keeps what the user said and, as ``Assistant: ...`` atoms, the assistant's answers to the user's
requests, which is what ``single-session-assistant`` questions ask about.

    python bench/longmemeval_recall.py --quick     # 6 questions, one per type
    python bench/longmemeval_recall.py             # all 60
    python bench/longmemeval_recall.py --types single-session-assistant   # the questions of some types only

Each question is measured on its own: a fresh workspace (files, the atom index, the raw-turn index) that holds
only its user, so BM25's statistics are those of its own history, as LongMemEval's retrieval baselines have them,
and a question's figures do not depend on which questions ran before it. The full run takes about 3.5 hours of a
quiet 2-core machine (e5 embeds every turn whole, ~115k tokens a question, and every atom), so each finished
question is appended to a record file at once (``--records``; by default beside the JSON, with ``.jsonl``) and a
run with the same file skips the questions it holds and reports all of them. A record carries the embedder and a
fingerprint of the code that scored it (every file of ``mnemoflow/`` and the two bench modules); a run refuses
records of other code, so a resumed report is what one run of this code would write.

Writes ``bench/results/longmemeval_recall.json`` (``longmemeval_recall-quick.json`` with ``--quick``, the types
appended with ``--types``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.locomo_recall import TurnClock, heuristic_pipeline, within, workspace  # noqa: E402
from bench.report import Run, Table, result_path  # noqa: E402
from mnemoflow.config import Settings  # noqa: E402
from mnemoflow.embedding.factory import build_embedder  # noqa: E402
from mnemoflow.events import TurnEvent  # noqa: E402
from mnemoflow.memory.l0 import L0Writer  # noqa: E402
from mnemoflow.memory.l1.pipeline import L1Pipeline  # noqa: E402
from mnemoflow.memory.l1.triggers import L1Triggers, TriggerState  # noqa: E402
from mnemoflow.memory.recall.config import RECIPES  # noqa: E402
from mnemoflow.memory.recall.recaller import Recaller  # noqa: E402
from mnemoflow.ports import Embedder  # noqa: E402
from mnemoflow.ports.vectors import AtomRow  # noqa: E402
from mnemoflow.storage import LocalFileStore  # noqa: E402
from mnemoflow.tokens import count_tokens  # noqa: E402

TENANT = "lme"
SYSTEMS = ["hybrid", "bm25_raw", "dense_raw", "hybrid_raw"]
DEPTH = 30
RAW_CHARS = 8000


def safe(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:@-]", "_", value)[:100]


def when(date: str) -> datetime:
    """'2023/05/30 (Tue) 23:40' -> an aware UTC datetime."""
    return datetime.strptime(re.sub(r"\s*\(\w+\)\s*", " ", date), "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def turns_of(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The history as flat turns: id, session, role, text, time, evidence flag."""
    out = []
    for sid, date, session in zip(
        item["haystack_session_ids"], item["haystack_dates"], item["haystack_sessions"], strict=True
    ):
        for i, turn in enumerate(session):
            out.append(
                {
                    "id": f"{safe(sid)}-{i}",
                    "session": sid,
                    "role": turn["role"],
                    "text": turn["content"],
                    "ts": when(date) + timedelta(seconds=30 * i),
                    "evidence": bool(turn.get("has_answer")),
                }
            )
    return out


async def ingest(
    user: str, turns: list[dict[str, Any]], files: LocalFileStore, pipeline: L1Pipeline, clock: TurnClock
) -> int:
    """Replay one history into L0, running L1 when the trigger machine decides; returns passes run."""
    triggers, state, writer, passes = L1Triggers(), TriggerState(), L0Writer(files), 0

    async def run(decision: Any) -> None:
        nonlocal state, passes
        if decision.run:
            await pipeline.run(TENANT, user)
            passes += 1
            state, again = triggers.on_success(state, clock.now())
            await run(again)

    session = None
    for turn in turns:
        if session is not None and turn["session"] != session:
            state, d = triggers.on_session_end(state, clock.now())
            await run(d)
        session, clock.t = turn["session"], turn["ts"]
        writer.write([turn_event(TENANT, user, turn)])
        if turn["role"] == "user":
            state, d = triggers.on_turn(state, clock.now())
            await run(d)
    state, d = triggers.on_session_end(state, clock.now())
    await run(d)
    return passes


def turn_event(tenant: str, user: str, turn: dict[str, Any]) -> TurnEvent:
    """One haystack turn of :func:`turns_of` as the event the stack would receive (an empty turn still counts)."""
    return TurnEvent(
        tenant=tenant,
        message_id=turn["id"],
        user=user,
        session=safe(turn["session"]),
        role=turn["role"],
        content=turn["text"] or "(empty)",
        ts=turn["ts"],
    )


def raw_rows(user: str, turns: list[dict[str, Any]], embedder: Embedder) -> list[AtomRow]:
    """One row per turn; a turn longer than a row holds (some assistant answers are 30k characters) becomes
    several rows that all cite it."""
    pieces = [
        (t, n, t["text"][start : start + RAW_CHARS] or "(empty)")
        for t in turns
        for n, start in enumerate(range(0, max(1, len(t["text"])), RAW_CHARS))
    ]
    vectors = embedder.embed([text for _, _, text in pieces])
    return [
        AtomRow(
            id=f"{t['id']}.{n}",
            tenant="raw",
            user=user,
            type="episodic",
            priority=50,
            text=text,
            vector=v,
            created=t["ts"],
            updated=t["ts"],
            source_message_ids=[t["id"]],
        )
        for (t, n, text), v in zip(pieces, vectors, strict=True)
    ]


def mean(xs: list[int]) -> float:
    return round(statistics.mean(xs), 4) if xs else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="6 questions, the first of each type")
    ap.add_argument("--eval-dir", default=str(ROOT.parent / "shared" / "eval"))
    ap.add_argument("--embedder", choices=["e5", "minilm"], default=Settings().embedder)
    ap.add_argument("--out")
    ap.add_argument("--records", help="the per-question record file to resume from and append to (see above)")
    ap.add_argument("--types", help="only questions of these types (comma-separated question_type values)")
    args = ap.parse_args()
    items = json.loads((Path(args.eval_dir) / "longmemeval" / "longmemeval-s-dev.json").read_text())
    if args.types:
        wanted = set(args.types.split(","))
        if unknown := wanted - {item["question_type"] for item in items}:
            raise SystemExit(f"unknown question types: {sorted(unknown)}")
        items = [item for item in items if item["question_type"] in wanted]
    if args.quick:
        first: dict[str, dict[str, Any]] = {}
        for item in items:
            first.setdefault(item["question_type"], item)
        items = list(first.values())
    suffix = "".join(f"-{part}" for part in ("quick" if args.quick else "", args.types or "") if part)
    out = result_path(f"longmemeval_recall{suffix}", args.out)
    embedder = build_embedder(Settings(embedder=args.embedder))
    run = Run("longmemeval_recall", "Evidence recall on LongMemEval-S dev: L1 atoms (heuristic) against raw turns")
    records = measure(items, Path(args.records) if args.records else out.with_suffix(".jsonl"), embedder)
    report(run, items, records, embedder, out)


# What of ``mnemoflow/`` a record depends on: everything this benchmark loads (checked after every question by
# :func:`check_fingerprinted`), not the stream, proxy, offload or CLI code it never runs.
FINGERPRINTED = (
    "config.py",
    "embedding",
    "errors.py",
    "events.py",
    "governance",
    "ids.py",
    "index",
    "lexical.py",
    "llm",
    "lru.py",
    "memory",
    "ports",
    "prompts",
    "retry.py",
    "scopes.py",
    "storage",
    "tokens.py",
)


# What of those folders the benchmark never loads (the L2/L3 engines and curation: it scores recall over atoms), so
# that a change to how scenes and the persona are written keeps the records; :func:`check_fingerprinted` fails a
# run that loads one of them.
NOT_LOADED = (
    "memory/curation.py",
    "memory/persona/facts.py",
    "memory/persona/heuristic.py",
    "memory/persona/llm.py",
    "memory/scenes/forget.py",
    "memory/scenes/heuristic.py",
    "memory/scenes/llm.py",
    "memory/scenes/passes.py",
    "memory/scenes/plan.py",
    "memory/scenes/text.py",
)


def fingerprinted_files() -> list[Path]:
    package = ROOT / "mnemoflow"
    paths = [package / "__init__.py"]
    skip = {package / name for name in NOT_LOADED}
    for name in FINGERPRINTED:
        path = package / name
        found = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts) or [path]
        paths += [p for p in found if p not in skip]
    return [*paths, ROOT / "bench" / "longmemeval_recall.py", ROOT / "bench" / "locomo_recall.py"]


def code_fingerprint() -> str:
    """What scored a record: a hash of the files of :data:`FINGERPRINTED` and of the two bench modules (a README,
    test or proxy change keeps it; a change to the engine, recall, the stores or the scoring changes it)."""
    digest = hashlib.sha256()
    for path in fingerprinted_files():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def check_fingerprinted() -> None:
    """Fail if the run loaded a module of ``mnemoflow`` that the fingerprint does not cover."""
    covered = {path.resolve() for path in fingerprinted_files()}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name.startswith("mnemoflow.") and file and Path(file).resolve() not in covered:
            raise SystemExit(f"{name} ({file}) scored this run but is not in FINGERPRINTED: add it")


def measure(items: list[dict[str, Any]], done_file: Path, embedder: Embedder) -> list[dict[str, Any]]:
    """One record per question (its hits per measure and system, counts, seconds), those already in ``done_file``
    included; each new record is appended to it as soon as it is measured. Each question runs in a workspace of
    its own, removed afterwards."""
    code = code_fingerprint()
    done = {}
    if done_file.exists():
        for line in done_file.read_text().splitlines():
            record = json.loads(line)
            if (record["embedder"], record.get("code")) != (embedder.model_id, code):
                raise SystemExit(
                    f"{done_file} holds records of {record['embedder']} with code {record.get('code')}, not "
                    f"{embedder.model_id} with code {code}: move it away (or pass --records) to start afresh"
                )
            done[record["question_id"]] = record
    if done:
        print(
            f"resuming from {done_file}: {sum(i['question_id'] in done for i in items)} of {len(items)} "
            "questions measured already",
            flush=True,
        )
    done_file.parent.mkdir(parents=True, exist_ok=True)
    records = []
    for n, item in enumerate(items, start=1):
        if item["question_id"] in done:
            records.append(done[item["question_id"]])
            continue
        work = Path(tempfile.mkdtemp(prefix="mnemoflow-lme-"))
        try:
            record = measure_one(item, work, embedder, code)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        check_fingerprinted()
        record["load_1m"] = round(os.getloadavg()[0], 2)  # a resumed report spans runs: each record keeps its load
        with done_file.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        records.append(record)
        print(
            f"[{n}/{len(items)}] {item['question_type']:26} turns {record['turns']:4}  atoms {record['atoms']:4}  "
            + "  ".join(f"{s} {record['hits']['turn10'].get(s, '-')}" for s in SYSTEMS)
            + f"  {record['seconds']:.0f} s",
            flush=True,
        )
    return records


def measure_one(item: dict[str, Any], work: Path, embedder: Embedder, code: str) -> dict[str, Any]:
    """Replay one question's history into a fresh workspace and rank its evidence with every system."""
    started = time.perf_counter()
    files, store, raw, own = workspace(work, embedder)
    clock = TurnClock()
    pipeline = heuristic_pipeline(files, store, embedder, clock)
    recaller = Recaller(store=store, embedder=embedder, files=files)
    user, turns = safe(f"q-{item['question_id']}"), turns_of(item)
    passes = asyncio.run(ingest(user, turns, files, pipeline, clock))
    raw.upsert(raw_rows(user, turns, embedder))
    evidence = {t["id"] for t in turns if t["evidence"]}
    session_of = {t["id"]: t["session"] for t in turns}
    answer_sessions = set(item["answer_session_ids"])
    budget = round(10 * statistics.mean(count_tokens(t["text"]) for t in turns))
    (vec,) = embedder.embed_query([item["question"]])
    q = item["question"]
    ranked = {
        "hybrid": recaller.hits(TENANT, user, q, vec, RECIPES["hybrid_rrf"], DEPTH, when(item["question_date"])),
        "bm25_raw": raw.bm25_search("raw", user, q, DEPTH),
        "dense_raw": raw.dense_search("raw", user, vec, DEPTH),
        "hybrid_raw": raw.search("raw", user, q, vec, DEPTH),
    }
    hits: dict[str, dict[str, int]] = {"turn10": {}, "turn10_budget": {}, "session5": {}}
    for system, found in ranked.items():
        listed = [(h.row.text, h.row.source_message_ids) for h in found]
        sessions = [{session_of[m] for m in src if m in session_of} for _, src in listed[:5]]
        hits["session5"][system] = int(any(answer_sessions & x for x in sessions))
        if evidence:
            hits["turn10"][system] = int(any(evidence & set(src) for _, src in listed[:10]))
            kept = within(listed, budget)
            hits["turn10_budget"][system] = int(any(evidence & set(src) for _, src in kept))
    record = {
        "question_id": item["question_id"],
        "question_type": item["question_type"],
        "embedder": embedder.model_id,
        "code": code,
        "hits": hits,
        "sources_per_atom": [len(h.row.source_message_ids) for h in ranked["hybrid"][:10]],
        "turns": len(turns),
        "atoms": store.count(TENANT, user),
        "passes": passes,
        "has_evidence": bool(evidence),
        "seconds": round(time.perf_counter() - started, 1),
    }
    for index in (store, raw, own):
        index.close()
    return record


def report(run: Run, items: list[dict[str, Any]], records: list[dict[str, Any]], embedder: Embedder, out: Path) -> None:
    def table(measure: str) -> dict[str, Any]:
        per: dict[str, dict[str, list[int]]] = {s: defaultdict(list) for s in SYSTEMS}
        for r in records:
            for system, hit in r["hits"][measure].items():
                per[system][r["question_type"]].append(hit)
        res: dict[str, Any] = {s: mean([x for v in per[s].values() for x in v]) for s in SYSTEMS}
        res["by_type"] = {k: {s: mean(per[s][k]) for s in SYSTEMS} for k in sorted(per["hybrid"])}
        return res

    sources_per_atom = [n for r in records for n in r["sources_per_atom"]]
    elapsed = sum(r["seconds"] for r in records)
    counts = {k: sum(r[k] for r in records) for k in ("turns", "atoms", "passes")}
    result: dict[str, Any] = {
        "turn_recall_at_10": table("turn10"),
        "turn_recall_at_10_budgeted": table("turn10_budget"),
        "session_recall_at_5": table("session5"),
        "source_turns_per_atom": {
            "hybrid": round(statistics.mean(sources_per_atom), 3) if sources_per_atom else 0.0,
            "bm25_raw": 1.0,
            "dense_raw": 1.0,
        },
        "questions": len(items),
        "questions_without_evidence_turns": sum(not r["has_evidence"] for r in records),
        "turns": counts["turns"],
        "atoms": counts["atoms"],
        "l1_passes": counts["passes"],
        "engine": "heuristic",
        "embedder": embedder.model_id,
        "store": "sqlite",
        "budget": "10 raw turns' o200k tokens (mean turn length of the question's history)",
        "hit_definitions": {
            "turn": "a top-10 item cites a has_answer turn",
            "session": "a top-5 item comes from an answer_session_ids session",
        },
        "elapsed_s": round(elapsed, 1),
    }
    overall = [
        [
            system,
            f"{result['turn_recall_at_10'][system]:.3f}",
            f"{result['turn_recall_at_10_budgeted'][system]:.3f}",
            f"{result['session_recall_at_5'][system]:.3f}",
        ]
        for system in SYSTEMS
    ]
    by_type = [
        [kind, *(f"{row[system]:.2f}" for system in SYSTEMS)]
        for kind, row in result["turn_recall_at_10"]["by_type"].items()
    ]
    loads = [r["load_1m"] for r in records if "load_1m" in r]
    notes = [
        f"{len(items)} questions, {counts['turns']:,} turns, {counts['atoms']:,} atoms; heuristic engine,"
        f" {embedder.model_id} + SQLite; {elapsed:,.0f} s of question time in all (a resumed run adds its records'"
        " time)",
        f"source turns per returned atom (hybrid top 10): {result['source_turns_per_atom']['hybrid']}",
    ]
    if loads:
        notes.append(f"load average after each question: {min(loads)} to {max(loads)}")
    tables = [
        Table(
            title="Evidence recall over all questions",
            columns=["system", "turn R@10", "turn R@10 at equal tokens", "session R@5"],
            rows=overall,
        ),
        Table(title="Turn R@10 by question type", columns=["type", *SYSTEMS], rows=by_type),
    ]
    run.finish(tables, result, out, notes=notes)


if __name__ == "__main__":
    main()
