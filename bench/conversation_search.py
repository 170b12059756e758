"""``conversations/search`` latency for one user with many L0 messages: the scan it replaced against the index.

Writes ``--messages`` synthetic messages (four in five English from a Zipf-like vocabulary, one in five Chinese,
over ``--days`` day files)
to a fresh L0 through :class:`~mnemoflow.memory.l0.L0Writer`, then times, for the same queries:

* ``scan``          what the route did before the index: read the user's whole L0, BM25 in Python per query
* ``index_build``   the first search, which builds the index from L0 (once per user, or after a lost file)
* ``index``         a search when nothing was appended since the last one
* ``index_append``  a search after 5 new messages landed in the newest day file (the catch-up is in the time)

    python bench/conversation_search.py            # 20,000 messages
    python bench/conversation_search.py --quick    # 2,000 messages
    python bench/conversation_search.py --smoke --out /tmp/cs.json   # 200 messages: that it runs (the tests)

Prints a table and writes ``bench/results/conversation_search.json`` (``-quick`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import Run, Table, result_path  # noqa: E402
from mnemoflow.events import TurnEvent  # noqa: E402
from mnemoflow.lexical import bm25_scores
from mnemoflow.memory.conversations import INDEX_FILE, ConversationIndex
from mnemoflow.memory.l0 import L0Message, L0Writer, read_l0
from mnemoflow.storage import Layout, LocalFileStore

T0 = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
TOPICS = (
    "tea coffee garden hiking mountain river daughter school violin guitar doctor appointment train ticket "
    "paris berlin recipe pasta chess tournament marathon bike repair garage motorbike weekend birthday gift "
    "project deadline meeting budget report dog cat vet holiday beach museum novel library concert friend"
).split()
ZH = (
    "我喜欢在山里徒步旅行 我的女儿叫小美 她在北京上大学 周末我们去公园散步 "
    "明天要去医院看医生 我在学习弹吉他 今天下雨了 晚饭吃了饺子 "
    "我们下个月去上海出差 老板让我写报告 猫生病了要去看兽医 我最近在读一本小说 "
    "朋友请我去听音乐会 孩子开始学小提琴 预算还没有批下来 火车票已经买好了 "
    "我每天早上喝茶 周六有一场马拉松 自行车坏了要修 图书馆周一不开门"
).split()
QUERIES = ["hiking mountain", "violin", "train ticket paris", "chess", "marathon weekend", "徒步", "小美", "医生"]


def vocabulary(rnd: random.Random, size: int = 2000) -> tuple[list[str], list[float]]:
    """Zipf-like English: ``size`` made-up words with weight 1/rank, the topic words (what queries ask) spread
    over ranks 20 to 1000, so a query word is in about 0.1-3% of the messages, as a content word is in a chat."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rnd.choices(letters, k=rnd.randint(3, 9))) for _ in range(size)]
    for i, topic in enumerate(TOPICS):
        words[20 + i * 980 // len(TOPICS)] = topic
    return words, [1 / (rank + 1) for rank in range(size)]


def corpus(n: int, days: int, seed: int = 7) -> list[TurnEvent]:
    """``n`` messages, one in five Chinese (two sentences of ``ZH``), the rest 6-18 Zipf-drawn English words."""
    rnd = random.Random(seed)
    words, weights = vocabulary(rnd)
    out = []
    for i in range(n):
        text = (
            "，".join(rnd.sample(ZH, 2)) if i % 5 == 4 else " ".join(rnd.choices(words, weights, k=rnd.randint(6, 18)))
        )
        out.append(
            TurnEvent(
                tenant="bench",
                message_id=f"m{i}",
                user="u",
                session=f"s{i // 50}",
                role="user" if i % 2 == 0 else "assistant",
                content=text,
                ts=T0 + timedelta(days=i * days // n, seconds=i),
            )
        )
    return out


def scan(files: LocalFileStore, query: str, limit: int) -> list[tuple[L0Message, float]]:
    """The route before the index (the baseline): the whole L0 read and scored per query."""
    msgs = read_l0(files, "bench", "u", limit=10**7)
    scored = [(m, s) for m, s in zip(msgs, bm25_scores(query, [m.content for m in msgs]), strict=True) if s > 0]
    scored.sort(key=lambda h: -h[1])
    return scored[:limit]


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def stats(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "p50_ms": round(ms[len(ms) // 2], 2),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
        "mean_ms": round(sum(ms) / len(ms), 2),
        "n": len(ms),
    }


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    files = LocalFileStore(root, fsync=False)
    events = corpus(args.messages, args.days)
    writer = L0Writer(files)
    for start in range(0, len(events), 1000):
        writer.write(events[start : start + 1000])
    index = ConversationIndex(files)
    build = timed(lambda: index.search("bench", "u", QUERIES[0], args.limit))
    reps = [q for _ in range(args.rounds) for q in QUERIES]
    scan_ms = [timed(partial(scan, files, q, args.limit)) for q in reps[: len(QUERIES) * args.scan_rounds]]
    warm = [timed(partial(index.search, "bench", "u", q, args.limit)) for q in reps]
    appended = []
    last = events[-1]
    for i, q in enumerate(reps):
        new = [
            last.model_copy(update={"message_id": f"new{i}-{j}", "content": f"late note {i} {j} about hiking"})
            for j in range(5)
        ]
        writer.write(new)
        appended.append(timed(partial(index.search, "bench", "u", q, args.limit)))
    same = [
        [m.id for m, _ in scan(files, q, args.limit)] == [m.id for m, _ in index.search("bench", "u", q, args.limit)]
        for q in QUERIES
    ]
    index_path = root / Layout.user_dir("bench", "u") / INDEX_FILE
    l0_bytes = sum(p.stat().st_size for p in (root / Layout.conversations_dir("bench", "u")).glob("*.jsonl"))
    return {
        "scan": stats(scan_ms),
        "index_build": {"ms": round(build, 1)},
        "index": stats(warm),
        "index_append": stats(appended),
        "same_top_ids": f"{sum(same)}/{len(same)} queries",
        "l0_mb": round(l0_bytes / 2**20, 1),
        "index_mb": round(index_path.stat().st_size / 2**20, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--days", type=int, default=100)
    ap.add_argument("--limit", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=10, help="times each query is asked of the index")
    ap.add_argument("--scan-rounds", type=int, default=2, help="times each query is asked of the (slow) scan")
    ap.add_argument("--quick", action="store_true", help="2,000 messages over 20 days")
    ap.add_argument("--smoke", action="store_true", help="200 messages over 2 days, each query once (the tests)")
    ap.add_argument("--out", help="default bench/results/conversation_search.json (-quick.json with --quick)")
    args = ap.parse_args()
    if args.quick:
        args.messages, args.days = 2_000, 20
    if args.smoke:
        args.messages, args.days, args.rounds, args.scan_rounds = 200, 2, 1, 1
    run_ = Run("conversation_search", f"conversations/search at {args.messages:,} L0 messages of one user")
    with tempfile.TemporaryDirectory(prefix="mnemoflow-convsearch-") as tmp:
        r = run(args, Path(tmp))
    rows = [
        [name, *(str(r[name][k]) for k in ("p50_ms", "p99_ms", "mean_ms"))]
        for name in ("scan", "index", "index_append")
    ]
    rows.append(["index_build (the first search, once)", str(r["index_build"]["ms"]), "", ""])
    title = f"{args.messages:,} messages over {args.days} day files, one user, limit {args.limit}"
    notes = [f"L0 {r['l0_mb']} MB, index {r['index_mb']} MB; same top ids as the scan: {r['same_top_ids']}"]
    out = {"messages": args.messages, "days": args.days, "limit": args.limit, "results": r}
    table = Table(title=title, columns=["method", "p50 ms", "p99 ms", "mean ms"], rows=rows)
    run_.finish(
        [table], out, result_path("conversation_search", args.out, smoke=args.smoke, quick=args.quick), notes=notes
    )


if __name__ == "__main__":
    main()
