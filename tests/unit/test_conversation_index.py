"""The conversation index (mnemoflow/memory/conversations.py): catch-up from L0, idempotence, both languages, the
session filter, what it answers after L0 lost a message (retention, a replaced day file, an erase), a corrupt file,
and two processes catching up the same user at once."""

from __future__ import annotations

import io
import multiprocessing
import random
import sqlite3
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.events import TurnEvent
from mnemoflow.governance.bundle import export_user
from mnemoflow.governance.erase import Eraser
from mnemoflow.governance.tombstones import Tombstone, Tombstones
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.lexical import bm25_scores
from mnemoflow.memory.conversations import INDEX_FILE, ConversationIndex
from mnemoflow.memory.l0 import L0Writer, read_l0
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.storage import Layout, LocalFileStore
from mnemoflow.testing import files_holding

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
EMB = HashingEmbedder(64)


def say(files: LocalFileStore, texts: list[str], *, start: int = 0, session: str = "s1", day: int = 0) -> None:
    L0Writer(files).write(
        [
            TurnEvent(
                tenant="t",
                message_id=f"m{start + i}",
                user="u",
                session=session,
                role="user",
                content=text,
                ts=T0 + timedelta(days=day, minutes=start + i),
            )
            for i, text in enumerate(texts)
        ]
    )


def ids(files: LocalFileStore, query: str, limit: int = 20, session: str | None = None) -> list[str]:
    return [m.id for m, _ in ConversationIndex(files).search("t", "u", query, limit, session)]


def indexed(root: Path) -> list[tuple[str, int]]:
    """(day, line) of every indexed message, as the index file holds them."""
    with sqlite3.connect(root / Layout.user_dir("t", "u") / INDEX_FILE) as conn:
        return sorted(conn.execute("select day, line from messages"))


def test_a_search_indexes_l0_once_and_then_only_what_was_appended(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    say(files, ["I restore old motorbikes in my garage", "Nice hobby!"])
    assert ids(files, "motorbikes") == ["m0"]
    assert ids(files, "motorbikes") == ["m0"]
    assert len(indexed(tmp_path)) == 2
    say(files, ["The garage roof leaks"], start=2)
    say(files, ["Next day: a new motorbikes club"], start=3, day=1)
    assert set(ids(files, "garage")) == {"m0", "m2"}
    assert ids(files, "motorbikes club") == ["m3", "m0"]
    assert indexed(tmp_path) == [("2026-03-01.jsonl", 0), ("2026-03-01.jsonl", 1), ("2026-03-01.jsonl", 2)] + [
        ("2026-03-02.jsonl", 0)
    ]


def test_a_torn_last_line_waits_for_its_end(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    say(files, ["first about tea"])
    path = tmp_path / Layout.conversation_day("t", "u", T0.date())
    with path.open("ab") as fh:
        fh.write(b'{"id": "torn", "content": "tea')
    assert ids(files, "tea") == ["m0"]
    files.repair_tail(str(path.relative_to(tmp_path)))
    say(files, ["second about tea"], start=1)
    assert set(ids(files, "tea")) == {"m0", "m1"}
    assert len(indexed(tmp_path)) == 2


def test_chinese_words_match_inside_sentences_and_english_as_before(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    say(files, ["我喜欢在山里徒步旅行。", "我的女儿叫小美，她在北京上大学。", "I went hiking with Mei last week."])
    assert ids(files, "徒步") == ["m0"]
    assert ids(files, "小美") == ["m1"]
    assert ids(files, "HIKING") == ["m2"]
    assert set(ids(files, "hiking 徒步")) == {"m0", "m2"}
    assert ids(files, "滑雪") == [] and ids(files, "  ...  ") == []


def test_the_index_finds_what_the_scan_found(tmp_path: Path) -> None:
    """Same messages as the BM25 scan it replaces (scores positive, best first); FTS5's idf differs from the scan's
    for very common terms, so only the sets and the ranking of a rare term are compared."""
    files = LocalFileStore(tmp_path)
    words = ["tea", "milk", "paris", "dog", "chess", "bike", "doctor", "music", "rain", "boat", "茶", "下雨"]
    rnd = random.Random(7)
    texts = [" ".join(rnd.sample(words, rnd.randint(1, 4))) for _ in range(18)]
    say(files, texts)
    for query in ["tea", "chess boat", "下雨", "茶 milk", "doctor rain music"]:
        found = ConversationIndex(files).search("t", "u", query, 20)
        scan = bm25_scores(query, texts)
        assert {m.id for m, _ in found} == {f"m{i}" for i, s in enumerate(scan) if s > 0}
        assert all(s > 0 for _, s in found) and [s for _, s in found] == sorted((s for _, s in found), reverse=True)


def test_recaller_keeps_its_session_filter_and_limit_clamp(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    say(files, [f"chess game number {i}" for i in range(25)])
    say(files, ["chess in the other session"], start=25, session="s2")
    rec = Recaller(store=InMemoryVectorStore(dim=64, embedding_model=EMB.model_id), embedder=EMB, files=files)
    assert [h.message.id for h in rec.conversation_search("t", "u", "chess", session="s2")] == ["m25"]
    assert rec.conversation_search("t", "u", "chess", session="nope") == []
    assert len(rec.conversation_search("t", "u", "chess", limit=99)) == 20
    assert len(rec.conversation_search("t", "u", "chess", limit=0)) == 1
    assert rec.conversation_search("t", "other", "chess") == []
    assert not (tmp_path / Layout.user_dir("t", "other")).exists()  # a search never makes a user folder


def test_a_day_file_removed_by_retention_leaves_the_index(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    say(files, ["old news about the boat"])
    say(files, ["new news about the boat"], start=1, day=30)
    assert set(ids(files, "boat")) == {"m0", "m1"}
    files.remove(Layout.conversation_day("t", "u", T0.date()))
    assert ids(files, "boat") == ["m1"]
    assert indexed(tmp_path) == [("2026-03-31.jsonl", 0)]


def test_a_replaced_day_file_is_indexed_again(tmp_path: Path) -> None:
    """A rewrite of a day file (atomic: a new file under the name) drops what it no longer holds, also when the new
    file is longer than the old one was."""
    files = LocalFileStore(tmp_path)
    say(files, ["secret plan for the boat", "the boat is blue"])
    assert set(ids(files, "boat")) == {"m0", "m1"}
    path = Layout.conversation_day("t", "u", T0.date())
    kept = list(files.read_lines(path))[1:]
    longer = kept[0].replace("the boat is blue", "the boat is blue and it is a very long boat indeed" * 3)
    files.write_atomic(path, (longer + "\n").encode())
    assert ids(files, "boat") == ["m1"]
    assert ids(files, "secret") == []
    assert indexed(tmp_path) == [("2026-03-01.jsonl", 0)]


def test_an_erase_removes_the_index_with_the_user(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    say(files, ["my axolotl is named Zorblatt"])
    assert ids(files, "Zorblatt") == ["m0"]
    assert (tmp_path / Layout.user_dir("t", "u") / INDEX_FILE).exists()
    Eraser(files, InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)).erase_user("t", "u", T0, "op-1")
    assert files_holding(tmp_path, [b"Zorblatt"]) == {}
    say(files, ["I came back and talk about tea"], start=5)
    assert ids(files, "Zorblatt") == [] and ids(files, "tea") == ["m5"]


def test_a_search_while_an_erase_runs_answers_nothing_and_keeps_no_index(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    say(files, ["my axolotl is named Zorblatt"])
    Tombstones(files).put("t", "users", "u", Tombstone(erased_at=T0, operation_id="op-1", done=False))
    assert ids(files, "Zorblatt") == []
    assert not any((tmp_path / p).exists() for p in ConversationIndex.paths("t", "u"))


def test_export_does_not_ship_the_index(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    say(files, ["tea with milk"])
    assert ids(files, "tea") == ["m0"]
    manifest = export_user(files, "t", "u", io.BytesIO(), embedding_model=EMB.model_id, at=T0)
    assert [f.path for f in manifest.files] == ["user/conversations/2026-03-01.jsonl"]
    assert files.list_dir(Layout.user_dir("t", "u")) == ["conversations"]


def test_a_corrupt_or_older_index_is_built_again_from_l0(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    say(files, ["tea with milk", "coffee black"])
    assert ids(files, "tea") == ["m0"]
    index = tmp_path / Layout.user_dir("t", "u") / INDEX_FILE
    for suffix in ("-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    index.write_bytes(b"this is not a database" * 100)
    assert ids(files, "coffee") == ["m1"]
    with sqlite3.connect(index) as conn:
        conn.execute("pragma user_version = 0")
        conn.execute("delete from messages_fts")  # an older schema's content: thrown away, not trusted
    assert ids(files, "coffee") == ["m1"]
    assert len(indexed(tmp_path)) == 2


class _Remote:
    """A FileStore with no local root (only the port's methods)."""

    def __init__(self, files: LocalFileStore) -> None:
        self._files = files

    def __getattr__(self, name: str) -> Any:
        if name == "root":
            raise AttributeError(name)
        return getattr(self._files, name)


def test_a_store_without_a_local_disk_searches_a_throwaway_index(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    say(files, ["我喜欢在山里徒步旅行"])
    found = ConversationIndex(_Remote(files)).search("t", "u", "徒步", 5)
    assert [m.id for m, _ in found] == ["m0"]
    assert not (tmp_path / Layout.user_dir("t", "u") / INDEX_FILE).exists()


def _catch_up(root: str, barrier: Barrier, out: Any) -> None:
    barrier.wait()
    out.put(len(ConversationIndex(LocalFileStore(root)).search("t", "u", "chess", 20)))


def test_two_processes_catching_up_at_once_index_each_line_once(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    for day in range(4):
        say(files, [f"chess move {i} of day {day}" for i in range(300)], start=day * 1000, day=day)
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_catch_up, args=(str(tmp_path), barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert [out.get(timeout=5), out.get(timeout=5)] == [20, 20]
    rows = indexed(tmp_path)
    assert len(rows) == len(set(rows)) == len(read_l0(files, "t", "u", limit=10**6)) == 1200
