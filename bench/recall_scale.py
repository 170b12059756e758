"""Server-side recall at 10^5 and 10^6 synthetic atoms (a user per 100 atoms unless
``--atoms-per-user``), SQLite and Milvus, with the build.

For each size and backend: the index is built in batches of 1,000 from ``bench/store_latency.py``'s seeded corpus
(384-d random unit vectors, Zipf-like words, atoms spread evenly over users; streamed, never all in memory), timed
(seconds, atoms/s), measured on disk (SQLite: the file with its ``-wal``; Milvus: Milvus Lite's data directory) and
in memory (RSS of this process, and of Milvus Lite's server), then recall is timed over ``--queries`` queries of
random users after a warm-up: ``Recaller.recall_sync`` with ``RECIPES["hybrid_rrf"]`` at k=10 and the query vector
given (hybrid search with the boosts, supersession and rendering; no query embedding), as ``bench/locomo_recall.py``
times it at 10^5. Beside it, each half alone as the hybrid runs it (``dense_search`` and ``bm25_search`` at the
hybrid's depth of 50 candidates, rows fetched): which half dominates.

Backends: ``sqlite`` is the embedded default (``SqliteVectorStore``, one file in this process); ``milvus`` is the
cluster shape, ``MilvusVectorStore`` over gRPC to Milvus Lite's own server on a loopback port (``tests/cluster.py``'s
``MilvusLiteServer``), fused on the server as the service does by default. Target (issue 31): recall at 10^6
atoms p50 <= 15 ms and p99 <= 40 ms.

    python bench/recall_scale.py --quick                          # 10^4 atoms, 100 users, both backends: seconds
    nice -n 10 python bench/recall_scale.py                       # 10^5 and 10^6: hours on 2 cores
    python bench/recall_scale.py --sizes 1000000 --backends sqlite --keep /tmp/ix --out /tmp/recall_scale-1e6.json
    python bench/recall_scale.py --sizes 100000 --atoms-per-user 10000 --backends sqlite   # 10 heavy users

Prints a table and writes ``bench/results/recall_scale.json`` (``-quick`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import Run, Table, result_path  # noqa: E402
from bench.store_latency import MODEL, VERSIONS, Corpus, open_backend, stats, timed  # noqa: E402
from mnemoflow.index._common import candidate_depth  # noqa: E402
from mnemoflow.memory.recall.config import RECIPES
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.ports.vectors import VectorStore
from mnemoflow.storage import LocalFileStore

DIM = 384
TENANT = "bench"  # the corpus's
ATOMS_PER_USER = 100
BATCH = 1_000
WARMUP = 20
RECALL = RECIPES["hybrid_rrf"].model_copy(update={"k": 10})
DEPTH = candidate_depth(max(RECALL.k, RECALL.boost_depth), 50)
"""How deep each half is searched inside the hybrid (the boosts widen k to ``boost_depth``; the stores' default
``candidates`` is 50): the halves are timed alone at this depth."""
TARGET = {"atoms": 1_000_000, "p50_ms": 15.0, "p99_ms": 40.0}
BYTES_PER_ATOM = 4_500
"""Disk a built atom takes at most, both backends (SQLite keeps the vector twice, in ``atoms`` and ``atoms_vec``:
4.15 kB an atom at 10^6), so that a run that cannot fit stops before it builds."""

Query = tuple[str, str, list[float]]


def recall_ms(store: VectorStore, queries: Sequence[Query], files: Path, warmup: int = WARMUP) -> list[float]:
    """Milliseconds of server-side recall for each query after the first ``warmup``: ``recall_sync`` with the
    query vector given, so no embedding (hybrid search, boosts, supersession and rendering; the files hold no
    persona or scene). Shared with ``bench/locomo_recall.py``'s latency run."""
    recaller = Recaller(store=store, embedder=None, files=LocalFileStore(files))  # type: ignore[arg-type]
    ms: list[float] = []
    for i, (user, text, vec) in enumerate(queries):
        timed(functools.partial(recaller.recall_sync, TENANT, user, text, vec, RECALL), ms if i >= warmup else [])
    return ms


@dataclass
class Opened:
    store: VectorStore
    data: Path
    """What the index occupies on disk: the SQLite file (its ``-wal`` and ``-shm`` beside it), or Milvus Lite's
    data directory."""
    server_pid: int | None = None


@contextmanager
def opened(name: str, workdir: Path) -> Iterator[Opened]:
    """The backend as the service opens it, closed (and its server stopped) on exit."""
    if name == "sqlite":
        store = open_backend("sqlite", workdir, DIM)
        try:
            yield Opened(store, workdir / "atoms.sqlite")
        finally:
            store.close()
    elif name == "milvus":
        from mnemoflow.index.milvus import MilvusVectorStore
        from tests.cluster import MilvusLiteServer

        server = MilvusLiteServer(workdir / "milvus")
        try:
            store = MilvusVectorStore.open(server.start(), dim=DIM, embedding_model=MODEL)  # fusion: the default
            try:
                yield Opened(store, server.workdir, server.pid)
            finally:
                store.close()
        finally:
            server.stop()
    else:
        raise SystemExit(f"unknown backend {name!r} (sqlite, milvus)")


def disk_bytes(data: Path) -> int:
    if data.is_dir():
        return sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
    return sum(p.stat().st_size for p in data.parent.glob(data.name + "*"))


def mib(n: int) -> float:
    return round(n / 2**20, 1)


def build(store: VectorStore, corpus: Corpus, label: str, console: Console) -> float:
    """Upsert the corpus in batches with a progress bar (a line every tenth when the output is not a terminal);
    the build's seconds."""
    batches = -(-corpus.atoms // BATCH)
    columns = [
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]} atoms/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    t0 = time.perf_counter()
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(label, total=corpus.atoms, rate="-")
        for i, batch in enumerate(corpus.batches(BATCH), start=1):
            store.upsert(batch)
            done = min(i * BATCH, corpus.atoms)
            bar.update(task, completed=done, rate=f"{done / (time.perf_counter() - t0):,.0f}")
            if not console.is_terminal and (i * 10 // batches > (i - 1) * 10 // batches):
                print(f"{label}: {done:,}/{corpus.atoms:,} in {time.perf_counter() - t0:,.0f} s", flush=True)
    return time.perf_counter() - t0


def measure(
    name: str, atoms: int, queries: int, workdir: Path, console: Console, per_user: int = ATOMS_PER_USER
) -> dict[str, Any]:
    users = max(1, atoms // per_user)
    corpus = Corpus(atoms, users, DIM)
    with opened(name, workdir) as ix:
        build_s = build(ix.store, corpus, f"{name}, {atoms:,} atoms", console)
        assert ix.store.count(TENANT) == atoms, "the build lost atoms"
        process = psutil.Process()
        rss = process.memory_info().rss
        server_rss = psutil.Process(ix.server_pid).memory_info().rss if ix.server_pid else None
        size = disk_bytes(ix.data)
        load = os.getloadavg()[0]
        asked = corpus.queries(queries + WARMUP)
        recall = recall_ms(ix.store, asked, workdir / "files")
        dense: list[float] = []
        bm25: list[float] = []
        for user, text, vec in asked[WARMUP:]:
            timed(functools.partial(ix.store.dense_search, TENANT, user, vec, DEPTH), dense)
            timed(functools.partial(ix.store.bm25_search, TENANT, user, text, DEPTH), bm25)
    summary = stats(recall)
    return {
        "atoms": atoms,
        "users": users,
        "build_s": round(build_s, 1),
        "atoms_per_s": round(atoms / build_s),
        "disk_mib": mib(size),
        "rss_mib": mib(rss),
        "server_rss_mib": mib(server_rss) if server_rss is not None else None,
        "load_at_queries": round(load, 2),
        "recall": summary,
        "dense": stats(dense),
        "bm25": stats(bm25),
        "meets_target": summary["p50_ms"] <= TARGET["p50_ms"] and summary["p99_ms"] <= TARGET["p99_ms"],
        "versions": {p: metadata.version(p) for p in VERSIONS[name]},
    }


def row(name: str, r: dict[str, Any]) -> list[str]:
    server = f" (+{r['server_rss_mib']:,.0f} server)" if r["server_rss_mib"] is not None else ""
    return [
        f"{r['atoms']:,}",
        f"{r['users']:,}",
        name,
        f"{r['build_s']:,.1f}",
        f"{r['atoms_per_s']:,}",
        f"{r['disk_mib']:,.0f}",
        f"{r['rss_mib']:,.0f}{server}",
        f"{r['recall']['p50_ms']}",
        f"{r['recall']['p99_ms']}",
        f"{r['recall']['mean_ms']}",
        f"{r['dense']['p50_ms']}",
        f"{r['bm25']['p50_ms']}",
        f"{r['load_at_queries']}",
    ]


COLUMNS = [
    "atoms",
    "users",
    "backend",
    "build s",
    "atoms/s",
    "disk MiB",
    "RSS MiB",
    "recall p50 ms",
    "p99",
    "mean",
    "dense half p50",
    "BM25 half p50",
    "load",
]


def check_disk(root: Path, sizes: Sequence[int], backends: int, keep: bool) -> None:
    """Stop before building what ``root`` cannot hold: one index at a time (each is removed once measured), or
    every index with ``--keep``."""
    need, free = (sum(sizes) * backends if keep else max(sizes)) * BYTES_PER_ATOM, shutil.disk_usage(root).free
    if free < need * 1.2:
        raise SystemExit(f"{root} has {mib(free):,.0f} MiB free; the indexes need about {mib(need):,.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", help="comma list of atom counts, users a hundredth (default 100000,1000000)")
    ap.add_argument("--backends", default="sqlite,milvus", help="comma list of sqlite,milvus")
    ap.add_argument("--queries", type=int, help="timed queries per index, after 20 of warm-up (default 500)")
    ap.add_argument(
        "--atoms-per-user",
        type=int,
        default=ATOMS_PER_USER,
        help=f"atoms of each user (default {ATOMS_PER_USER}); e.g. 10000: heavy users, whose BM25 half reads the most",
    )
    ap.add_argument("--quick", action="store_true", help="10,000 atoms, 100 users, 100 queries unless given")
    ap.add_argument("--keep", metavar="DIR", help="build under DIR and keep the indexes (default: a temp dir)")
    ap.add_argument("--out", help="default bench/results/recall_scale.json (recall_scale-quick.json with --quick)")
    args = ap.parse_args()
    args.sizes = args.sizes or ("10000" if args.quick else "100000,1000000")
    args.queries = args.queries or (100 if args.quick else 500)
    sizes = [int(s) for s in args.sizes.split(",")]
    backends = args.backends.split(",")
    console = Console()
    scale = " and ".join(f"{s:,}" for s in sizes)
    run = Run("recall_scale", f"Server-side recall at {scale} atoms: {', '.join(backends)}")
    results: dict[str, dict[str, Any]] = {}
    workspace = nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="mnemoflow-recall-scale-")
    with workspace as tmp:
        Path(tmp).mkdir(parents=True, exist_ok=True)
        check_disk(Path(tmp), sizes, len(backends), bool(args.keep))
        for atoms in sizes:
            for name in backends:
                workdir = Path(tmp) / f"{name}-{atoms}"
                workdir.mkdir(parents=True)
                result = measure(name, atoms, args.queries, workdir, console, args.atoms_per_user)
                if not args.keep:
                    shutil.rmtree(workdir)
                results.setdefault(str(atoms), {})[name] = result
                print(f"{name}, {atoms:,} atoms: {json.dumps(result)}", flush=True)  # kept if a later size is killed
    rows = [row(name, r) for by_backend in results.values() for name, r in by_backend.items()]
    title = (
        f"{args.queries} queries of random users, k={RECALL.k}, halves at depth {DEPTH}; target at"
        f" {TARGET['atoms']:,} atoms: p50 <= {TARGET['p50_ms']:.0f} ms, p99 <= {TARGET['p99_ms']:.0f} ms"
    )
    out = {
        "sizes": sizes,
        "atoms_per_user": args.atoms_per_user,
        "dim": DIM,
        "k": RECALL.k,
        "depth": DEPTH,
        "queries": args.queries,
        "warmup": WARMUP,
        "target": TARGET,
        "results": results,
    }
    notes = [
        "RSS MiB: this process after the build (SQLite runs in it); for Milvus, + its server process's.",
        "load: the 1-minute load average when the queries started.",
    ]
    path = result_path("recall_scale", args.out, quick=args.quick)
    run.finish([Table(title=title, columns=COLUMNS, rows=rows)], out, path, notes)


if __name__ == "__main__":
    main()
