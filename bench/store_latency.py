"""Per-user hybrid search latency of each VectorStore backend at N synthetic atoms.

Builds ``--atoms`` atoms spread evenly over ``--users`` users (one tenant), 384-d seeded random vectors and
texts drawn from a Zipf-like vocabulary, then times ``search`` (hybrid, RRF as recall fuses) filtered to one random
user, plus dense-only and BM25-only for reference. Query embedding is not included: vectors are given.

    python bench/store_latency.py --quick
    python bench/store_latency.py --smoke --out /tmp/store_latency.json   # seconds: that it runs, not a figure
    python bench/store_latency.py --atoms 100000 --users 1000 --backends sqlite,milvus

Prints a table and writes ``bench/results/store_latency.json`` (``-quick`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import Run, Table, result_path  # noqa: E402
from mnemoflow.index import InMemoryVectorStore  # noqa: E402
from mnemoflow.ports.vectors import ATOM_TYPES, AtomRow, VectorStore

MODEL = "synthetic-384"
VERSIONS = {
    "memory": [],
    "sqlite": ["apsw", "sqlite-vec"],
    "milvus": ["pymilvus", "milvus-lite"],
    "milvus_client": ["pymilvus", "milvus-lite"],
}


def open_backend(name: str, workdir: Path, dim: int) -> VectorStore:
    if name == "memory":
        return InMemoryVectorStore(dim=dim, embedding_model=MODEL)
    if name == "sqlite":
        from mnemoflow.index.sqlite import SqliteVectorStore

        return SqliteVectorStore.open(str(workdir / "atoms.sqlite"), dim=dim, embedding_model=MODEL)
    if name in ("milvus", "milvus_client"):  # milvus_client: both searches, RRF fused in Python
        from mnemoflow.index.milvus import MilvusVectorStore

        fusion: Literal["server", "client"] = "client" if name == "milvus_client" else "server"
        return MilvusVectorStore.open(str(workdir / f"{name}.db"), dim=dim, embedding_model=MODEL, fusion=fusion)
    raise SystemExit(f"unknown backend {name!r}")


class Corpus:
    """Deterministic synthetic atoms and queries (seeded), so every backend sees the same data."""

    def __init__(self, atoms: int, users: int, dim: int, seed: int = 7) -> None:
        self.atoms, self.users, self.dim = atoms, users, dim
        self.rng = np.random.default_rng(seed)
        self.vocab = [f"w{i}" for i in range(5000)]
        p = 1.0 / np.arange(1, len(self.vocab) + 1)
        self.p = p / p.sum()
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def words(self, n: int) -> str:
        return " ".join(self.rng.choice(self.vocab, size=n, p=self.p))

    def vectors(self, n: int) -> np.ndarray:
        v = self.rng.standard_normal((n, self.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def batches(self, size: int = 1000) -> Any:
        for start in range(0, self.atoms, size):
            n = min(size, self.atoms - start)
            vecs = self.vectors(n)
            yield [
                AtomRow(
                    id=f"a{start + j}",
                    tenant="bench",
                    user=f"user{(start + j) % self.users}",
                    type=ATOM_TYPES[(start + j) % 3],
                    priority=50,
                    text=self.words(int(self.rng.integers(8, 17))),
                    vector=vecs[j].tolist(),
                    created=self.now,
                    updated=self.now,
                    source_message_ids=[f"m{start + j}"],
                )
                for j in range(n)
            ]

    def queries(self, n: int) -> list[tuple[str, str, list[float]]]:
        vecs = self.vectors(n)
        return [(f"user{int(self.rng.integers(self.users))}", self.words(4), vecs[i].tolist()) for i in range(n)]


def timed(fn: Callable[[], Any], reps: list[float]) -> None:
    t = time.perf_counter()
    fn()
    reps.append((time.perf_counter() - t) * 1000)


def stats(ms: list[float]) -> dict[str, float]:
    a = np.array(ms)
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 2),
        "p99_ms": round(float(np.percentile(a, 99)), 2),
        "mean_ms": round(float(a.mean()), 2),
    }


def run_backend(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    corpus = Corpus(args.atoms, args.users, args.dim)
    store = open_backend(name, workdir, args.dim)
    t0 = time.perf_counter()
    for batch in corpus.batches():
        store.upsert(batch)
    ingest_s = time.perf_counter() - t0
    assert store.count("bench") == args.atoms
    queries = corpus.queries(args.queries + args.warmup)
    for user, text, vec in queries[: args.warmup]:
        store.search("bench", user, text, vec, args.k)
    hybrid: list[float] = []
    dense: list[float] = []
    bm25: list[float] = []
    for user, text, vec in queries[args.warmup :]:
        timed(functools.partial(store.search, "bench", user, text, vec, args.k), hybrid)
        timed(functools.partial(store.dense_search, "bench", user, vec, args.k), dense)
        timed(functools.partial(store.bm25_search, "bench", user, text, args.k), bm25)
    store.close()
    return {
        "hybrid": stats(hybrid),
        "dense": stats(dense),
        "bm25": stats(bm25),
        "ingest_s": round(ingest_s, 1),
        "versions": {p: metadata.version(p) for p in VERSIONS[name]},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--atoms", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--backends", default="sqlite,milvus", help="comma list of memory,sqlite,milvus,milvus_client")
    ap.add_argument("--quick", action="store_true", help="2,000 atoms / 20 users / 100 queries, all backends")
    ap.add_argument("--smoke", action="store_true", help="300 atoms / 5 users / 10 queries, all backends (the tests)")
    ap.add_argument("--out", help="default bench/results/store_latency.json (store_latency-quick.json with --quick)")
    args = ap.parse_args()
    if args.quick:
        args.atoms, args.users, args.queries, args.backends = 2_000, 20, 100, "memory,sqlite,milvus"
    if args.smoke:
        args.atoms, args.users, args.queries, args.warmup, args.backends = 300, 5, 10, 2, "memory,sqlite,milvus"
    run = Run("store_latency", f"Per-user hybrid search latency at {args.atoms:,} atoms over {args.users:,} users")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mnemoflow-bench-") as tmp:
        for name in args.backends.split(","):
            print(f"[{name}] ingesting {args.atoms} atoms over {args.users} users ...", flush=True)
            results[name] = run_backend(name, args, Path(tmp))
    rows = [
        [name]
        + [f"{r[kind][q]}" for kind in ("hybrid", "dense", "bm25") for q in ("p50_ms", "p99_ms")]
        + [f"{r['ingest_s']}"]
        for name, r in results.items()
    ]
    columns = ["backend", "hybrid p50 ms", "p99", "dense p50 ms", "p99", "BM25 p50 ms", "p99", "ingest s"]
    out = {
        "atoms": args.atoms,
        "users": args.users,
        "dim": args.dim,
        "k": args.k,
        "queries": args.queries,
        "results": results,
    }
    title = f"{args.atoms:,} atoms, {args.users:,} users, dim {args.dim}, k={args.k}, {args.queries} queries"
    run.finish(
        [Table(title=title, columns=columns, rows=rows)],
        out,
        result_path("store_latency", args.out, smoke=args.smoke, quick=args.quick),
    )


if __name__ == "__main__":
    main()
