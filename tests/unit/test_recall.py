import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.events import TurnEvent
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.memory.recall.config import RECIPES, RecallConfig
from mnemoflow.memory.recall.format import fit, memory_line
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.ports.vectors import ATOM_TYPES, AtomRow
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock

T0 = datetime(2026, 4, 2, 15, 30, tzinfo=UTC)
EMB = HashingEmbedder(64)


def row(i: int, user: str, text: str, kind: str = "persona") -> AtomRow:
    return AtomRow(
        id=f"a{i}",
        tenant="t",
        user=user,
        type=kind,
        priority=60,
        text=text,
        vector=EMB.embed([text])[0],
        created=T0,
        updated=T0 + timedelta(days=3),
        source_message_ids=[f"m{i}"],
    )


def make(tmp_path: Path, rows: list[AtomRow], config: RecallConfig | None = None) -> Recaller:
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    store.upsert(rows)
    return Recaller(store=store, embedder=EMB, files=LocalFileStore(tmp_path), config=config)


def test_line_format_uses_the_time_the_fact_was_said_and_is_cut_with_a_pointer() -> None:
    r = row(1, "u", "Ana drinks oat milk")
    assert memory_line(r, 400) == "- [persona] Ana drinks oat milk (2026-04-02)"
    long = memory_line(row(2, "u", "word " * 200), 80)
    assert len(long) == 80 and long.endswith("(more: memory_search)")


def test_budget_keeps_whole_lines_and_cuts_one_only_if_40_chars_remain() -> None:
    lines = ["x" * 50, "y" * 50, "z" * 50]
    assert fit(lines, 101) == lines[:2]
    assert fit(lines, 150) == [lines[0], lines[1], "z" * 47 + "…"]  # 101 used + newline + 48 = 150
    assert len("\n".join(fit(lines, 150))) == 150
    assert fit(lines, 150)[:2] == [lines[0], lines[1]]
    assert fit(lines, 120) == lines[:2]


def test_recall_returns_prepend_and_system_context_with_persona_and_navigation(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from mnemoflow.memory.persona.generate import PersonaStore
    from mnemoflow.memory.scenes.model import SceneBlock, render_scene

    files = LocalFileStore(tmp_path)
    when = datetime(2026, 4, 2, tzinfo=UTC)
    lab = SceneBlock("lab.md", "Lab work", "Ana runs assays.", heat=3, created=when, updated=when, atom_ids=("a1",))
    gone = SceneBlock("gone.md", "Old", "x", heat=1, created=when, updated=when).tombstone(when)
    for block in (lab, gone):
        files.write_atomic(f"t/users/u/scenes/{block.filename}", render_scene(block).encode())
    PersonaStore(files, "t", "u").write("Ana is a chemist.", {"lab.md": lab})
    rec = make(tmp_path, [row(1, "u", "Ana drinks oat milk"), row(2, "u", "Ana runs marathons", "episodic")])
    out = rec.recall_sync("t", "u", "what milk does Ana drink")
    assert (
        out.prepend_context.startswith("<relevant-memories>\n")
        and "- [persona] Ana drinks oat milk" in out.prepend_context
    )
    assert out.hits[0].id == "a1" and out.hits[0].source_message_ids == ["m1"]
    assert "<user-persona>\nAna is a chemist.\n</user-persona>" in out.system_context
    assert out.system_context.count("Scene Navigation") == 1  # the persona's own copy is not repeated
    assert "t/users/u/scenes/lab.md" in out.system_context and "Lab work" in out.system_context
    assert "gone.md" not in out.system_context and "memory_search" in out.system_context


def test_nothing_to_inject_gives_empty_context(tmp_path: Path) -> None:
    out = make(tmp_path, []).recall_sync("t", "u", "anything")
    assert (out.prepend_context, out.system_context, out.hits) == ("", "", [])


class SlowStore(InMemoryVectorStore):
    def search(self, *a, **kw):  # type: ignore[no-untyped-def]
        time.sleep(0.5)
        return super().search(*a, **kw)


def test_timeout_degrades_to_no_hits_but_keeps_the_persona(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    files.write_atomic("t/users/u/persona.md", b"Ana is a chemist.")
    store = SlowStore(dim=64, embedding_model=EMB.model_id)
    store.upsert([row(1, "u", "Ana drinks oat milk")])
    rec = Recaller(store=store, embedder=EMB, files=files, config=RecallConfig(timeout_s=0.05))
    start = time.perf_counter()
    out = asyncio.run(rec.recall("t", "u", "oat milk"))
    assert out.timed_out and out.hits == [] and out.prepend_context == ""
    assert "Ana is a chemist." in out.system_context and time.perf_counter() - start < 0.6


class SlowEmbedder(HashingEmbedder):
    def embed_query(self, texts: list[str]) -> list[list[float]]:
        time.sleep(0.3)
        return super().embed_query(texts)


def test_a_late_embedding_answers_from_bm25_and_says_so(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    files.write_atomic("t/users/u/persona.md", b"Ana is a chemist.")
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    store.upsert([row(1, "u", "Ana drinks oat milk"), row(2, "u", "Ana runs on Sundays")])
    late = Recaller(store=store, embedder=SlowEmbedder(64), files=files, config=RecallConfig(embed_deadline_s=0.05))
    out = asyncio.run(late.recall("t", "u", "oat milk"))
    assert out.elapsed_ms < 250  # did not wait for the embedding
    assert out.degraded == "lexical" and not out.timed_out
    assert [h.text for h in out.hits] == ["Ana drinks oat milk"] and out.hits[0].dense_rank is None
    assert "Ana is a chemist." in out.system_context
    in_time = Recaller(store=store, embedder=SlowEmbedder(64), files=files, config=RecallConfig(embed_deadline_s=1))
    full = asyncio.run(in_time.recall("t", "u", "oat milk"))
    assert full.degraded is None and full.hits[0].dense_rank is not None


def test_a_recall_says_where_it_spent_its_time(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    files.write_atomic("t/users/u/persona.md", b"Ana is a chemist.")
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    store.upsert([row(1, "u", "Ana drinks oat milk")])
    slow = Recaller(store=store, embedder=SlowEmbedder(64), files=files, config=RecallConfig(embed_deadline_s=1))
    out = asyncio.run(slow.recall("t", "u", "oat milk"))
    assert set(out.stages_ms) == {"embed", "search", "context"}
    assert 300 <= out.stages_ms["embed"] <= out.elapsed_ms  # the embedding's 0.3 s, measured as the recall waited
    assert 0 <= out.stages_ms["search"] < 300 and out.stages_ms["context"] >= 0
    late = Recaller(store=store, embedder=SlowEmbedder(64), files=files, config=RecallConfig(embed_deadline_s=0.05))
    lexical = asyncio.run(late.recall("t", "u", "oat milk"))
    assert lexical.degraded == "lexical" and 50 <= lexical.stages_ms["embed"] < 300  # given up at its deadline
    bm25 = Recaller(store=store, embedder=EMB, files=files, config=RecallConfig(methods=("bm25",)))
    assert set(asyncio.run(bm25.recall("t", "u", "oat milk")).stages_ms) == {"search", "context"}  # no embedding


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.queries: list[str] = []

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        self.queries += texts
        return super().embed_query(texts)


def test_a_long_query_searches_with_its_head(tmp_path: Path) -> None:
    """A pasted task description is not embedded whole (a second of CPU, past the timeout): its head is searched."""
    embedder = CountingEmbedder()
    store = InMemoryVectorStore(dim=64, embedding_model=embedder.model_id)
    store.upsert([row(1, "u", "Ana drinks oat milk"), row(2, "u", "Bo repairs bikes")])
    rec = Recaller(store=store, embedder=embedder, files=LocalFileStore(tmp_path), config=RecallConfig(k=1))
    query = "What does Ana drink? " + "and " * 200 + "Bo repairs bikes " * 50  # Bo only past 500 characters
    out = asyncio.run(rec.recall("t", "u", query))
    assert embedder.queries == [query[:500]] and [h.id for h in out.hits] == ["a1"]


def test_recipes_differ_only_by_config(tmp_path: Path) -> None:
    rec = make(tmp_path, [row(1, "u", "Ana drinks oat milk"), row(2, "u", "Bo likes tea")])
    for name, cfg in RECIPES.items():
        hits = rec.hits("t", "u", "oat milk", None, cfg)
        assert hits and hits[0].id == "a1", name


def test_memory_search_filters_by_type_inside_the_query(tmp_path: Path) -> None:
    rec = make(tmp_path, [row(1, "u", "Ana drinks oat milk"), row(2, "u", "Ana bought oat milk", "episodic")])
    assert [h.id for h in rec.memory_search("t", "u", "oat milk", type="episodic")] == ["a2"]
    assert len(rec.memory_search("t", "u", "oat milk", limit=99)) == 2


def test_conversation_search_and_drill_down_reach_l0(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    texts = ["I restore old motorbikes in my garage on weekends.", "Nice hobby!", "What's the weather?"]
    L0Writer(files).write(
        [
            TurnEvent(
                tenant="t",
                message_id=f"m{i}",
                user="u",
                session="s1" if i < 2 else "s2",
                role="user" if i % 2 == 0 else "assistant",
                content=t,
                ts=T0 + timedelta(minutes=i),
            )
            for i, t in enumerate(texts)
        ]
    )
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    result = asyncio.run(
        L1Pipeline(
            files=files,
            store=store,
            embedder=EMB,
            extractor=HeuristicExtractor(),
            judge=HeuristicJudge(),
            clock=ManualClock(T0),
        ).run("t", "u")
    )
    rec = Recaller(store=store, embedder=EMB, files=files)
    hits = rec.conversation_search("t", "u", "motorbikes garage")
    assert [h.message.id for h in hits] == ["m0"]
    assert rec.conversation_search("t", "u", "motorbikes", session="s2") == []
    down = rec.drill_down("t", "u", result.atom_ids[0])
    assert down.record is not None and [m.id for m in down.messages] == ["m0"]


WORDS = ["tea", "milk", "paris", "dog", "chess", "bike", "doctor", "music", "rain", "boat"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    facts=st.lists(
        st.tuples(
            st.integers(0, 7), st.lists(st.sampled_from(WORDS), min_size=2, max_size=5), st.sampled_from(ATOM_TYPES)
        ),
        min_size=1,
        max_size=40,
    ),
    user=st.integers(0, 7),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    types=st.none() | st.lists(st.sampled_from(ATOM_TYPES), min_size=1, max_size=3, unique=True),
    recipe=st.sampled_from(sorted(RECIPES)),
)
def test_a_users_recall_never_returns_another_users_atom(tmp_path: Path, facts, user, query, types, recipe) -> None:
    rows = [row(i, f"user{u}", " ".join(words), kind) for i, (u, words, kind) in enumerate(facts)]
    rec = make(tmp_path, rows, RECIPES[recipe].model_copy(update={"types": tuple(types) if types else None}))
    me = f"user{user}"
    mine = {r.id for r in rows if r.user == me}
    out = rec.recall_sync("t", me, " ".join(query))
    assert {h.id for h in out.hits} <= mine
    assert all(h.type in (types or ATOM_TYPES) for h in out.hits)
    for h in rec.memory_search("t", me, " ".join(query), limit=20):
        assert h.id in mine
    theirs = [r.text for r in rows if r.user != me and r.text not in {x.text for x in rows if x.user == me}]
    assert not any(f"] {t} (" in out.prepend_context for t in theirs)


def test_conversation_search_finds_chinese_words_inside_sentences(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    texts = ["我喜欢在山里徒步旅行。", "我的女儿叫小美，她在北京上大学。", "I went hiking with Mei last week."]
    L0Writer(files).write(
        [
            TurnEvent(
                tenant="t",
                message_id=f"m{i}",
                user="u",
                session="s",
                role="user",
                content=t,
                ts=T0 + timedelta(minutes=i),
            )
            for i, t in enumerate(texts)
        ]
    )
    rec = Recaller(store=InMemoryVectorStore(dim=64, embedding_model=EMB.model_id), embedder=EMB, files=files)
    assert [h.message.id for h in rec.conversation_search("t", "u", "徒步")] == ["m0"]
    assert [h.message.id for h in rec.conversation_search("t", "u", "小美")] == ["m1"]
    assert {h.message.id for h in rec.conversation_search("t", "u", "hiking 徒步")} == {"m0", "m2"}


def test_a_viewer_recalls_shared_memory_and_its_own_and_each_hit_says_its_scope(tmp_path: Path) -> None:
    """docs/concepts/scopes.md: the coder sees the user's facts, its team's and its own notes, never the support
    agent's; without a viewer (an admin key, every caller from before scopes) every scope is searched."""
    from mnemoflow.scopes import Viewer

    rows = [
        row(1, "u", "Ana drinks oat milk"),
        row(2, "u", "Answer Ana about milk in short bullet points", "instruction").model_copy(
            update={"scope": "agent:coder"}
        ),
        row(3, "u", "Ana asked support about a refund for the milk frother").model_copy(
            update={"scope": "agent:support"}
        ),
        row(4, "u", "Ana's milk order ships on Fridays").model_copy(update={"scope": "team:eng"}),
    ]
    rec = make(tmp_path, rows)
    coder = Viewer(agent="coder", team="eng")
    out = rec.recall_sync("t", "u", "milk for Ana", viewer=coder)
    assert {(h.id, h.scope) for h in out.hits} == {("a1", "shared"), ("a2", "agent:coder"), ("a4", "team:eng")}
    assert "- [instruction, private] Answer Ana" in out.prepend_context
    assert "- [persona, team] Ana's milk order" in out.prepend_context
    assert "- [persona] Ana drinks oat milk" in out.prepend_context
    assert {h.id for h in rec.memory_search("t", "u", "milk", 20, viewer=coder)} == {"a1", "a2", "a4"}
    support = rec.memory_search("t", "u", "milk", 20, viewer=Viewer(agent="support"))
    assert {h.id for h in support} == {"a1", "a3"}
    assert {h.id for h in rec.memory_search("t", "u", "milk", 20)} == {"a1", "a2", "a3", "a4"}
