"""Governance benchmark: erase, export, import and reindex at the scale issue 10 names, and recall agreement.

Two parts, on real files and the SQLite atom index, with MiniLM (``--embedder`` picks another):

* **Agreement.** LoCoMo conversation 0 goes through L0 and the L1 pipeline (deterministic engine) as its two
  speakers. Every LoCoMo question is asked of both users (hybrid search, top 10). Then (a) each user is exported
  and imported into a fresh data directory and index under another tenant and user id, and (b) the index file is
  deleted and rebuilt from ``records/``; the share of questions with an identical top-10 (same ids, same order)
  is reported for each.
* **Scale.** A user with ``--atoms`` atoms (default 10,000) and ``--days`` L0 day files (default 100), their text
  drawn from every LoCoMo conversation and each message stamped with a unique marker. Timed: reindex of that
  user into an empty index (atoms/s, embedding included), export to a bundle (atoms/s), import of the bundle into
  a fresh stack (atoms/s, embedding included), and the erase (the operation as the extractor applies it: files,
  index rows, SQLite scrub; Kafka and the worker round trip are not included). After the erase every file of the
  data directory, the index file included, is searched for the user's markers: ``residue_bytes_after_erase`` is
  the size of the files still holding one, plus whatever is left in the user's folder. The LoCoMo users' files
  and index rows must be exactly as before the erase (``others_untouched``).

    python bench/governance.py                 # the issue's scale
    python bench/governance.py --quick         # 500 atoms, 10 days, hashing embedder: a smoke run

Prints a table and writes ``bench/results/governance.json`` (``governance-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import Run, Table, result_path  # noqa: E402
from mnemoflow.config import Settings  # noqa: E402
from mnemoflow.embedding.factory import build_embedder
from mnemoflow.events import TurnEvent
from mnemoflow.governance.applier import OperationApplier
from mnemoflow.governance.bundle import BundleImporter, export_user
from mnemoflow.governance.operations import EraseUser, OperationEvent
from mnemoflow.governance.reindex import reindex_user
from mnemoflow.index.sqlite import SqliteVectorStore
from mnemoflow.index.sqlite_scrub import scrub_sqlite_index
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.models import L1Record
from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.ports import Embedder, SystemClock
from mnemoflow.replay import from_locomo
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import files_holding

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval" / "locomo" / "locomo-dev.json"
TENANT, BIG = "bench", "big-user"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Site:
    """One stack's storage: a data directory and its SQLite atom index."""

    def __init__(self, root: Path, embedder: Embedder) -> None:
        self.root, self.embedder = root, embedder
        self.files = LocalFileStore(root)
        (root / "index").mkdir(parents=True, exist_ok=True)
        self.index = str(root / "index" / "atoms.sqlite")
        self.store = SqliteVectorStore.open(self.index, dim=embedder.dim, embedding_model=embedder.model_id)
        self.pipeline = L1Pipeline(
            files=self.files,
            store=self.store,
            embedder=embedder,
            extractor=HeuristicExtractor(),
            judge=HeuristicJudge(),
            clock=SystemClock(),
        )

    def top10(self, tenant: str, user: str, questions: list[str]) -> list[list[str]]:
        vectors = self.embedder.embed_query(questions)
        return [
            [h.id for h in self.store.search(tenant, user, q, v, 10)] for q, v in zip(questions, vectors, strict=True)
        ]

    def reopen(self) -> None:
        self.store.close()
        self.store = SqliteVectorStore.open(self.index, dim=self.embedder.dim, embedding_model=self.embedder.model_id)


def agreement(a: list[list[str]], b: list[list[str]]) -> float:
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def locomo() -> list[dict[str, Any]]:
    if not EVAL.exists():
        raise SystemExit(f"LoCoMo data not found at {EVAL}")
    return json.loads(EVAL.read_text())


def ingest_locomo(site: Site, sample: dict[str, Any]) -> list[str]:
    replay = from_locomo(sample)
    events = [TurnEvent.from_input(TENANT, t, T0) for t in replay.items]
    L0Writer(site.files).write(events)
    users = sorted({e.user for e in events})
    for user in users:
        asyncio.run(site.pipeline.run(TENANT, user))
    return users


def texts(samples: list[dict[str, Any]]) -> Iterator[str]:
    while True:
        for sample in samples:
            conv = sample["conversation"]
            k = 1
            while f"session_{k}" in conv:
                for turn in conv[f"session_{k}"]:
                    if turn.get("text"):
                        yield turn["text"]
                k += 1


def marker(i: int) -> str:
    return f"qz{i:06d}vk"


def write_big_user(site: Site, samples: list[dict[str, Any]], atoms: int, days: int) -> None:
    """L0 with ``days`` day files and ``atoms`` records (one per message), each text carrying its marker."""
    source = texts(samples)
    per_day = -(-atoms // days)
    log = RecordLog(site.files, TENANT, BIG)
    for d in range(days):
        day_ts = T0 + timedelta(days=d)
        n = range(d * per_day, min(atoms, (d + 1) * per_day))
        said = [(i, f"{next(source)} [{marker(i)}]") for i in n]
        L0Writer(site.files).write(
            [
                TurnEvent(
                    tenant=TENANT,
                    message_id=f"big-m{i}",
                    user=BIG,
                    session=f"big-s{d}",
                    role="user",
                    content=text,
                    ts=day_ts + timedelta(seconds=k),
                )
                for k, (i, text) in enumerate(said)
            ]
        )
        records = [
            L1Record(
                id=f"a_big{i:06d}",
                content=text[:2000],
                type=("persona", "episodic", "instruction")[i % 3],
                priority=i % 100,
                source_message_ids=[f"big-m{i}"],
                timestamps=[day_ts],
                created=day_ts,
                updated=day_ts,
            )
            for i, text in said
        ]
        log.append(records, [], day_ts)


def snapshot(site: Site, user: str) -> tuple[list[tuple[str, str, list[float]]], dict[str, bytes]]:
    """A user's index rows and files, to show an erase of someone else changed neither. (Not their rankings: BM25
    statistics are index-wide, so removing another user's atoms moves scores a little by design.)"""
    ids = [r.id for r in RecordLog(site.files, TENANT, user).read()]
    rows = [(r.id, r.text, r.vector) for r in site.store.get(TENANT, user, ids)]
    home = site.root / TENANT / "users" / user
    return rows, {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


def residue(root: Path, markers: list[bytes], user_dir: Path) -> tuple[int, list[str]]:
    """Bytes of the files still holding a marker, plus anything left in the user's folder; and those files."""
    where = sorted({p for paths in files_holding(root, markers).values() for p in paths})
    size = sum((root / p).stat().st_size for p in where)
    if user_dir.exists():
        size += sum(p.stat().st_size for p in user_dir.rglob("*") if p.is_file())
    return size, where


def run(atoms: int, days: int, embedder_name: str, workdir: Path) -> dict[str, Any]:
    settings = Settings(data_dir=workdir, embedder=embedder_name)  # type: ignore[arg-type]
    embedder = build_embedder(settings)
    samples = locomo()
    sample = samples[0]
    questions = [q["question"] for q in sample["qa"]]
    out: dict[str, Any] = {"atoms": atoms, "l0_days": days, "embedder": embedder.model_id, "questions": len(questions)}

    site = Site(workdir / "a", embedder)
    users = ingest_locomo(site, sample)
    before = {u: site.top10(TENANT, u, questions) for u in users}
    out["locomo_atoms"] = sum(site.store.count(TENANT, u) for u in users)

    # Agreement after export -> import into a fresh stack, under another tenant and user id.
    fresh = Site(workdir / "b", embedder)
    for k, user in enumerate(users):
        bundle = io.BytesIO()
        export_user(site.files, TENANT, user, bundle, embedding_model=embedder.model_id, at=datetime.now(UTC))
        bundle.seek(0)
        BundleImporter(fresh.files, fresh.store, embedder).import_bundle(bundle, "elsewhere", f"u{k}")
    # Asked once both are in: BM25 statistics are index-wide, so the fresh index must hold what the old one held.
    imported = [fresh.top10("elsewhere", f"u{k}", questions) for k in range(len(users))]
    import_agreement = sum(agreement(before[u], imported[k]) for k, u in enumerate(users)) / len(users)

    # Agreement after deleting the index file and rebuilding it from records/.
    site.store.close()
    for p in (workdir / "a" / "index").iterdir():
        p.unlink()
    site.reopen()
    for user in users:
        reindex_user(site.files, site.store, embedder, TENANT, user)
    reindex_agreement = sum(agreement(before[u], site.top10(TENANT, u, questions)) for u in users) / len(users)
    out["recall_agreement"] = {"import": import_agreement, "reindex": reindex_agreement}

    # Scale: the big user.
    write_big_user(site, samples, atoms, days)
    start = time.perf_counter()
    indexed = reindex_user(site.files, site.store, embedder, TENANT, BIG)
    out["reindex_atoms_per_s"] = indexed / (time.perf_counter() - start)

    bundle_file = workdir / "big.tar"
    start = time.perf_counter()
    with bundle_file.open("wb") as fh:
        manifest = export_user(site.files, TENANT, BIG, fh, embedding_model=embedder.model_id, at=datetime.now(UTC))
    out["export_atoms_per_s"] = atoms / (time.perf_counter() - start)
    out["bundle_bytes"] = bundle_file.stat().st_size
    out["bundle_files"] = len(manifest.files)

    target = Site(workdir / "c", embedder)
    start = time.perf_counter()
    with bundle_file.open("rb") as fh:
        result = BundleImporter(target.files, target.store, embedder).import_bundle(fh, TENANT, BIG)
    out["import_atoms_per_s"] = result["atoms_indexed"] / (time.perf_counter() - start)

    others_before = {u: snapshot(site, u) for u in users}
    applier = OperationApplier.over(
        files=site.files,
        store=site.store,
        embedder=embedder,
        clock=SystemClock(),
        pipeline=site.pipeline,
        scrub=lambda: scrub_sqlite_index(site.index),
    )
    event = OperationEvent(
        tenant=TENANT, operation_id="bench-erase", op=EraseUser(user=BIG), submitted_at=datetime.now(UTC)
    )
    start = time.perf_counter()
    reply = asyncio.run(applier.apply(event))
    out["erase_s"] = time.perf_counter() - start
    assert reply.ok, reply.error
    out["erase_result"] = reply.result
    sampled = [marker(i).encode() for i in random.Random(7).sample(range(atoms), min(atoms, 500))]
    out["residue_bytes_after_erase"], out["residue_files"] = residue(
        workdir / "a", sampled, workdir / "a" / TENANT / "users" / BIG
    )
    out["others_untouched"] = {u: snapshot(site, u) == others_before[u] for u in users}
    for s in (site, fresh, target):
        s.store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--atoms", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=100)
    parser.add_argument(
        "--embedder",
        default="minilm",
        choices=["minilm", "e5", "hashing"],
        help="minilm: the figures in the README; e5 is the stack's default (about 8x the cost)",
    )
    parser.add_argument("--quick", action="store_true", help="500 atoms, 10 days, hashing embedder")
    parser.add_argument("--out", type=Path, help="default bench/results/governance.json (-quick.json with --quick)")
    args = parser.parse_args()
    if args.quick:
        args.atoms, args.days, args.embedder = 500, 10, "hashing"
    run_ = Run(
        "governance", f"Governance: erase, export, import and reindex at {args.atoms:,} atoms over {args.days} days"
    )
    workdir = Path(tempfile.mkdtemp(prefix="mnemoflow-governance-"))
    try:
        result = run(args.atoms, args.days, args.embedder, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = [
        ["erase one user (s)", f"{result['erase_s']:.2f}"],
        ["export (atoms/s)", f"{result['export_atoms_per_s']:.0f}"],
        ["import (atoms/s)", f"{result['import_atoms_per_s']:.0f}"],
        ["reindex (atoms/s)", f"{result['reindex_atoms_per_s']:.0f}"],
        ["recall agreement after import", f"{result['recall_agreement']['import']:.3f}"],
        ["recall agreement after reindex", f"{result['recall_agreement']['reindex']:.3f}"],
        ["bytes of the erased user left anywhere", str(result["residue_bytes_after_erase"])],
        ["other users untouched", str(all(result["others_untouched"].values()))],
    ]
    out = result_path("governance", args.out, quick=args.quick)
    table = Table(title=f"Governance, embedder {args.embedder}", columns=["measure", "value"], rows=rows)
    run_.finish([table], result, out)


if __name__ == "__main__":
    main()
