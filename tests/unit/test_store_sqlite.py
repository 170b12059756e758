"""SQLite-specific behaviour beyond the shared contract: one file shared by several processes, and errors."""

from __future__ import annotations

import subprocess
import sys
from array import array
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mnemoflow.errors import StorageError
from mnemoflow.ports.vectors import AtomRow

pytest.importorskip("apsw")
pytest.importorskip("sqlite_vec")

from mnemoflow.index import _sqlite_schema as schema  # noqa: E402
from mnemoflow.index._common import user_key  # noqa: E402
from mnemoflow.index.sqlite import SqliteVectorStore  # noqa: E402

_WRITER = """
import sys
from datetime import UTC, datetime
from mnemoflow.ports.vectors import AtomRow
from mnemoflow.index.sqlite import SqliteVectorStore
s = SqliteVectorStore.open(sys.argv[1], dim=4, embedding_model="m")
now = datetime.now(UTC)
s.upsert([AtomRow(id=f"b{i}", tenant="t", user="other", type="episodic", priority=1, text=f"from child {i}",
                  vector=[1.0, 0.0, float(i), 1.0], created=now, updated=now) for i in range(20)])
print(s.count("t"))
s.close()
"""


def _row(i: int) -> AtomRow:
    now = datetime.now(UTC)
    return AtomRow(
        id=f"a{i}",
        tenant="t",
        user="me",
        type="persona",
        priority=5,
        text=f"from parent {i}",
        vector=[0.0, 1.0, float(i), 1.0],
        created=now,
        updated=now,
    )


def test_two_processes_share_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    store = SqliteVectorStore.open(path, dim=4, embedding_model="m")
    store.upsert([_row(i) for i in range(10)])
    child = subprocess.run([sys.executable, "-c", _WRITER, path], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    assert int(child.stdout.strip()) == 30  # the child saw the parent's rows
    assert store.count("t", "other") == 20  # and the parent sees the child's, with the file still open
    assert [h.row.user for h in store.search("t", "other", "child", [1.0, 0.0, 3.0, 1.0], 5)] == ["other"] * 5
    assert store._conn.execute("pragma journal_mode").fetchone()[0] == "wal"
    store.close()


def test_an_index_of_the_first_layout_is_re_analysed_on_open(tmp_path: Path) -> None:
    """Version 1 kept the raw text in FTS (a Chinese sentence was one token); opening it rebuilds the FTS table."""
    path = str(tmp_path / "v1.db")
    store = SqliteVectorStore.open(path, dim=4, embedding_model="m")
    now = datetime.now(UTC)
    store.upsert(
        [
            AtomRow(
                id="zh",
                tenant="t",
                user="me",
                type="persona",
                priority=5,
                text="我的女儿叫小美",
                vector=[0.0, 1.0, 0.0, 1.0],
                created=now,
                updated=now,
            )
        ]
    )
    with store._conn:  # make the file look like version 1: raw text as its one term, old schema version
        store._conn.execute("update lex_postings set term = '我的女儿叫小美' where term = '女儿'")
        store._conn.execute("update meta set value = '1' where key = 'schema_version'")
    assert store.bm25_search("t", "me", "女儿", 3) == []
    store.close()
    reopened = SqliteVectorStore.open(path, dim=4, embedding_model="m")
    assert [h.id for h in reopened.bm25_search("t", "me", "女儿", 3)] == ["zh"]
    version = reopened._conn.execute("select value from meta where key = 'schema_version'").fetchone()[0]
    assert version == schema.SCHEMA_VERSION
    reopened.close()


def test_an_index_without_context_gains_the_column_on_open(tmp_path: Path) -> None:
    """Version 2 had no ``context`` column: opening adds it (empty), rows and searches are unchanged."""
    path = str(tmp_path / "v2.db")
    store = SqliteVectorStore.open(path, dim=4, embedding_model="m")
    store.upsert([_row(i) for i in range(3)])
    with store._conn:
        store._conn.execute("alter table atoms drop column context")
        store._conn.execute("update meta set value = '2' where key = 'schema_version'")
    store.close()
    reopened = SqliteVectorStore.open(path, dim=4, embedding_model="m")
    assert [r.context for r in reopened.get("t", "me", ["a0", "a1", "a2"])] == ["", "", ""]
    assert [h.id for h in reopened.bm25_search("t", "me", "parent 1", 1)] == ["a1"]
    reopened.upsert([_row(1).model_copy(update={"context": "asked about the harbour"})])
    assert [h.id for h in reopened.bm25_search("t", "me", "harbour", 3)] == ["a1"]
    reopened.close()


_V3 = """
create table meta(key text primary key, value text not null);
create table atoms(
    rid integer primary key,
    tenant text not null, user text not null, atom_id text not null,
    type text not null, priority integer not null, text text not null, context text not null default '',
    created text not null, updated text not null, source_ids text not null,
    vec blob not null,
    unique(tenant, user, atom_id)
);
create virtual table atoms_fts using fts5(ukey, atype, body, tokenize='unicode61 remove_diacritics 2');
create virtual table atoms_vec using vec0(
    rid integer primary key, ukey text partition key, atype text,
    embedding float[4] distance_metric=cosine, chunk_size=16
);
insert into meta values ('schema_version', '3'), ('embedding_model', 'm'), ('dim', '4');
"""


def test_an_index_from_before_scopes_migrates_on_open_with_every_atom_shared(tmp_path: Path) -> None:
    """A version 3 file (the layout before scopes, written here as that version wrote it) opens without a rebuild by
    hand and without embedding anything: its atoms are shared, found by every search, and new atoms take scopes."""
    path = str(tmp_path / "v3.db")
    conn = schema.connect(path, 1000)
    with conn:
        conn.execute(_V3)
        for i in range(3):
            vec = array("f", [0.0, 1.0, float(i), 1.0]).tobytes()
            now = datetime.now(UTC).isoformat()
            conn.execute(
                "insert into atoms values (?, 't', 'me', ?, 'persona', 5, ?, '', ?, ?, '[]', ?)",
                (i + 1, f"a{i}", f"from parent {i}", now, now, vec),
            )
            conn.execute(
                "insert into atoms_fts(rowid, ukey, atype, body) values (?, ?, 'persona', ?)",
                (i + 1, user_key("t", "me"), f"from parent {i}"),
            )
            conn.execute(
                "insert into atoms_vec(rid, ukey, atype, embedding) values (?, ?, 'persona', ?)",
                (i + 1, user_key("t", "me"), vec),
            )
    conn.close()
    store = SqliteVectorStore.open(path, dim=4, embedding_model="m")
    assert [r.scope for r in store.get("t", "me", ["a0", "a1", "a2"])] == ["shared"] * 3
    query = [0.0, 1.0, 1.0, 1.0]
    assert [h.id for h in store.bm25_search("t", "me", "parent 1", 1, visible=["shared"])] == ["a1"]
    assert store.dense_search("t", "me", query, 1, visible=["shared", "agent:coder"])[0].id == "a1"
    assert store.search("t", "me", "parent", query, 5, visible=["agent:coder"]) == []
    store.upsert([_row(7).model_copy(update={"scope": "agent:coder"})])
    assert [h.id for h in store.search("t", "me", "parent 7", query, 5, visible=["agent:coder"])] == ["a7"]
    assert (
        store._conn.execute("select value from meta where key = 'schema_version'").fetchone()[0]
        == schema.SCHEMA_VERSION
    )
    assert not list(store._conn.execute("select name from sqlite_master where name = 'atoms_fts'"))
    store.close()


def _as_version(path: str, version: int, old_table: str) -> SqliteVectorStore:
    """An open index of three atoms made to look like one of schema ``version``: no ``lex_*`` rows, the table that
    version kept the terms in (``old_table``, its DDL), and that version in ``meta``."""
    store = SqliteVectorStore.open(path, dim=4, embedding_model="m")
    store.upsert([_row(i) for i in range(3)])
    with store._conn:
        for table in ("lex_postings", "lex_atoms", "lex_users"):
            store._conn.execute(f"delete from {table}")
        store._conn.execute(old_table)
        store._conn.execute("update meta set value = ? where key = 'schema_version'", (str(version),))
    return store


def test_an_index_of_version_4_trades_its_fts_table_for_the_terms_table_on_open(tmp_path: Path) -> None:
    """Version 4 kept the terms in FTS5: opening drops that table and fills the ``lex_*`` tables from ``atoms``; the
    vec table, whose layout did not change, is kept as it is (nothing re-inserted)."""
    path = str(tmp_path / "v4.db")
    store = _as_version(path, 4, "create virtual table atoms_fts using fts5(ukey, atype, skey, body)")
    vec_rows = list(store._conn.execute("select rowid, chunk_id, chunk_offset from atoms_vec_rowids"))
    store.close()
    reopened = SqliteVectorStore.open(path, dim=4, embedding_model="m")
    assert [h.id for h in reopened.bm25_search("t", "me", "parent 1", 1)] == ["a1"]
    assert not list(reopened._conn.execute("select name from sqlite_master where name = 'atoms_fts'"))
    assert list(reopened._conn.execute("select rowid, chunk_id, chunk_offset from atoms_vec_rowids")) == vec_rows
    assert reopened.dense_search("t", "me", [0.0, 1.0, 2.0, 1.0], 1)[0].id == "a2"
    reopened.close()


def test_an_index_of_version_5_trades_its_terms_table_for_postings_on_open(tmp_path: Path) -> None:
    """Version 5 (never released) kept each atom's terms in one row of ``atoms_terms``: opening drops it and fills
    the ``lex_*`` tables from ``atoms``."""
    path = str(tmp_path / "v5.db")
    store = _as_version(path, 5, "create table atoms_terms(tenant, user, rid, atom_id, type, scope, terms, nterms)")
    assert store.bm25_search("t", "me", "parent 1", 1) == []
    store.close()
    reopened = SqliteVectorStore.open(path, dim=4, embedding_model="m")
    assert [h.id for h in reopened.bm25_search("t", "me", "parent 1", 1)] == ["a1"]
    assert not list(reopened._conn.execute("select name from sqlite_master where name = 'atoms_terms'"))
    assert list(reopened._conn.execute("select tenant, user, docs, length from lex_users")) == [("t", "me", 3, 9)]
    reopened.close()


def test_the_lexical_tables_follow_upserts_supersedes_and_deletes(tmp_path: Path) -> None:
    """Each user's statistics row counts the user's atoms and their terms, through rewrites and deletes; a deleted
    atom leaves no posting; the user's last delete removes the user's row (an erased user's name leaves the file)."""
    from mnemoflow.index import InMemoryVectorStore

    sqlite = SqliteVectorStore.open(str(tmp_path / "lex.db"), dim=4, embedding_model="m")
    memory = InMemoryVectorStore(dim=4, embedding_model="m")
    conn = sqlite._conn

    def same_as_memory(user: str) -> None:
        for query in ("parent", "cat parent 2", "cat 山"):
            want = [(h.id, h.score) for h in memory.bm25_search("t", user, query, 10)]
            assert [(h.id, h.score) for h in sqlite.bm25_search("t", user, query, 10)] == want
        counted = conn.execute(
            "select count(*), sum(nterms), count(distinct uid) from lex_atoms"
            " where uid in (select uid from lex_users where tenant = 't' and user = ?)",
            (user,),
        ).fetchone()
        stats = conn.execute("select docs, length from lex_users where tenant = 't' and user = ?", (user,)).fetchone()
        assert (stats or (0, None)) == counted[:2] and counted[2] <= 1
        distinct = sum(len(t.split()) for (t,) in conn.execute("select terms from lex_atoms"))
        assert conn.execute("select count(*), sum(tf) from lex_postings").fetchone() == (
            distinct,
            conn.execute("select sum(nterms) from lex_atoms").fetchone()[0],
        )

    for store in (sqlite, memory):
        store.upsert([_row(i) for i in range(5)])
        store.upsert([_row(i).model_copy(update={"user": "other", "text": "cat cat 山"}) for i in range(2)])
        store.upsert([_row(2).model_copy(update={"text": "a cat and a parent cat"})])  # a supersede rewrites
        store.delete("t", "me", ["a0", "a3"])
    same_as_memory("me")
    same_as_memory("other")
    for store in (sqlite, memory):
        store.delete("t", "me", ["a1", "a2", "a4"])
    assert list(conn.execute("select user from lex_users")) == [("other",)]
    assert list(conn.execute("select term, count(*) from lex_postings group by term")) == [("cat", 2), ("山", 2)]
    assert sqlite.bm25_search("t", "me", "parent cat", 10) == []
    same_as_memory("other")
    sqlite.close()


def test_bm25_scores_are_the_in_memory_references(tmp_path: Path) -> None:
    """The same atoms and queries give the in-memory store's BM25 scores and order, in English, Chinese and both,
    with and without type and scope filters (which choose hits, not the statistics)."""
    from mnemoflow.index import InMemoryVectorStore

    texts = [
        "我喜欢在山里徒步旅行，周末常去香山。",
        "我的女儿叫小美，她在北京上大学。",
        "上个月我去了一个 Python meetup，讲的是 asyncio。",
        "I adopted a grey cat named Pixel last spring.",
        "Pixel the cat likes the 山 and the cat tree",
        "cat",
        "。，！",
    ]
    now = datetime.now(UTC)
    rows = [
        AtomRow(
            id=f"a{i}",
            tenant="t",
            user="me",
            type=("persona", "episodic")[i % 2],
            priority=5,
            text=text,
            vector=[1.0, float(i), 0.0, 1.0],
            created=now,
            updated=now,
            scope=("shared", "agent:coder")[i % 3 == 0],
        )
        for i, text in enumerate(texts)
    ]
    sqlite = SqliteVectorStore.open(str(tmp_path / "bm25.db"), dim=4, embedding_model="m")
    memory = InMemoryVectorStore(dim=4, embedding_model="m")
    for store in (sqlite, memory):
        store.upsert(rows)
        store.upsert([rows[0].model_copy(update={"user": "other", "text": "cat cat 山"})])
    for query in ("cat", "Pixel cat 山", "徒步 小美 Python", "the cat tree", "nothing here"):
        for filters in ({}, {"types": ["persona"]}, {"visible": ["shared"]}):
            want = [(h.id, h.score) for h in memory.bm25_search("t", "me", query, 10, **filters)]  # type: ignore[arg-type]
            assert [(h.id, h.score) for h in sqlite.bm25_search("t", "me", query, 10, **filters)] == want  # type: ignore[arg-type]
    sqlite.close()


def test_the_best_are_the_in_memory_references_past_ties_and_rare_filters(tmp_path: Path) -> None:
    """Hundreds of atoms tied on score (ties go by atom id) and a filter that few pass: the atoms are looked up in
    rounds, best first, and the cut at k is still the in-memory store's."""
    from mnemoflow.index import InMemoryVectorStore

    now = datetime.now(UTC)
    rows = [
        AtomRow(
            id=f"a{i:03d}",
            tenant="t",
            user="me",
            type="episodic" if i % 97 else "persona",
            priority=5,
            text="cat on a mat" if i % 5 else "cat cat on a mat",
            vector=[1.0, float(i), 0.0, 1.0],
            created=now,
            updated=now,
            scope="agent:coder" if i % 50 == 7 else "shared",
        )
        for i in range(400)
    ]
    sqlite = SqliteVectorStore.open(str(tmp_path / "ties.db"), dim=4, embedding_model="m")
    memory = InMemoryVectorStore(dim=4, embedding_model="m")
    for store in (sqlite, memory):
        store.upsert(rows)
    for k in (1, 3, 90, 200):
        for filters in ({}, {"types": ["persona"]}, {"visible": ["agent:coder"]}, {"types": ["episodic"]}):
            want = [(h.id, h.score) for h in memory.bm25_search("t", "me", "cat mat", k, **filters)]  # type: ignore[arg-type]
            assert [(h.id, h.score) for h in sqlite.bm25_search("t", "me", "cat mat", k, **filters)] == want  # type: ignore[arg-type]
    sqlite.close()


def test_a_query_of_thousands_of_terms_is_searched(tmp_path: Path) -> None:
    """A pasted document as the query: its terms are one JSON parameter, not an ``or`` per term (SQLite refuses an
    expression deeper than 1,000)."""
    store = SqliteVectorStore.open(str(tmp_path / "long.db"), dim=4, embedding_model="m")
    store.upsert([_row(i) for i in range(3)])
    query = " ".join(f"word{i}" for i in range(3000)) + " parent 2"
    assert [h.id for h in store.bm25_search("t", "me", query, 1)] == ["a2"]
    store.close()


def test_the_partition_index_is_made_on_open_and_skipped_without_its_column(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file from before the index gains it on open (and after reembed, which rebuilds the vec table); a
    sqlite-vec whose shadow table lacks the column is logged, not fatal."""
    path = str(tmp_path / "p.db")
    store = SqliteVectorStore.open(path, dim=4, embedding_model="m")
    store.upsert([_row(i) for i in range(3)])
    indexes = "select name from sqlite_master where type = 'index' and tbl_name = 'atoms_vec_chunks'"
    assert [n for (n,) in store._conn.execute(indexes)] == ["atoms_vec_chunks_partition"]
    store._conn.execute("drop index atoms_vec_chunks_partition")
    store.close()
    store = SqliteVectorStore.open(path, dim=4, embedding_model="m")
    assert [n for (n,) in store._conn.execute(indexes)] == ["atoms_vec_chunks_partition"]
    store.reembed(lambda texts: [[1.0, 0.0, float(i), 1.0] for i in range(len(texts))])
    assert [n for (n,) in store._conn.execute(indexes)] == ["atoms_vec_chunks_partition"]
    assert [h.id for h in store.search("t", "me", "parent 2", [1.0, 0.0, 2.0, 1.0], 1)] == ["a2"]
    store.close()
    conn = schema.connect(str(tmp_path / "other.db"), 1000)
    conn.execute("create table atoms_vec_chunks(chunk_id integer primary key, size integer)")
    with caplog.at_level("WARNING"):
        schema.index_partitions(conn)
    assert "partition00" in caplog.text
    assert not list(conn.execute(indexes))
    conn.close()


def test_unopenable_file_raises_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        SqliteVectorStore.open(str(tmp_path / "no" / "such" / "dir" / "x.db"), dim=4, embedding_model="m")


def test_missing_vendor_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemoflow.index import _sqlite_schema

    monkeypatch.setitem(sys.modules, "sqlite_vec", None)
    with pytest.raises(ImportError, match=r"pip install mnemoflow\[sqlite\]"):
        _sqlite_schema.connect(":memory:", 1000)


def test_searches_and_writes_from_several_threads_at_once_all_succeed(tmp_path: Path) -> None:
    """The API searches on worker threads over one connection; apsw refuses two threads inside it at once."""
    from concurrent.futures import ThreadPoolExecutor

    store = SqliteVectorStore.open(str(tmp_path / "threads.db"), dim=4, embedding_model="m")
    store.upsert([_row(i) for i in range(50)])

    def work(i: int) -> int:
        if i % 10 == 0:
            store.upsert([_row(100 + i)])
        return len(store.search("t", "me", f"parent {i % 50}", [0.0, 1.0, float(i % 50), 1.0], 5))

    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(work, range(400)))
    assert found == [5] * 400
