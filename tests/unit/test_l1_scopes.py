"""Scopes in L1 (docs/concepts/scopes.md): extraction decides them by type and author, dedup stays inside one."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.events import TurnEvent
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.l0 import L0Message, L0Writer
from mnemoflow.memory.l1.dedup import DedupConfig, Deduper, NewAtom
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.models import AtomDraft, DedupDecision, L1Record, normalise
from mnemoflow.memory.l1.pipeline import L1Pipeline, L1Settings
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.l1.scoping import decide_scope
from mnemoflow.memory.l1.state import load_cursor
from mnemoflow.memory.l1.window import Author, Window, split_by_author
from mnemoflow.ports.vectors import AtomRow
from mnemoflow.scopes import Viewer
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock

T0 = datetime(2026, 2, 1, 12, tzinfo=UTC)
EMB = HashingEmbedder(64)
CODER, SUPPORT = Author("coder", "eng"), Author("support", "help")

INSTRUCTION = "From now on always answer me in short bullet points."
FACT = "I work as a paramedic on night shifts in Leeds."

Turn = tuple[str, str, Author, str]  # (session, role, author, text)


def say(files: LocalFileStore, turns: list[Turn], visibility: dict[int, str] | None = None, start: int = 0) -> None:
    """Turns a minute apart, ids m<start>, m<start + 1>, ...; ``visibility``: what turn i asked for."""
    asked = visibility or {}
    L0Writer(files).write(
        [
            TurnEvent(
                tenant="t",
                message_id=f"m{start + i}",
                user="u",
                session=session,
                role=role,
                content=text,
                ts=T0 + timedelta(minutes=start + i),
                agent=who.agent,
                team=who.team,
                visibility=asked.get(i),  # type: ignore[arg-type]
            )
            for i, (session, role, who, text) in enumerate(turns)
        ]
    )


@pytest.fixture
def files(tmp_path: Path) -> LocalFileStore:
    return LocalFileStore(tmp_path)


@pytest.fixture
def store() -> InMemoryVectorStore:
    return InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)


def run(files: LocalFileStore, store: InMemoryVectorStore) -> list[L1Record]:
    pipeline = L1Pipeline(
        files=files,
        store=store,
        embedder=EMB,
        extractor=HeuristicExtractor(),
        judge=HeuristicJudge(),
        clock=ManualClock(T0 + timedelta(days=1)),
    )
    asyncio.run(pipeline.run("t", "u"))
    return RecordLog(files, "t", "u").read()


def scopes_of(records: list[L1Record]) -> dict[str, str]:
    return {r.content: r.scope for r in records}


def test_facts_about_the_user_are_shared_and_an_instruction_stays_with_its_agent(files, store) -> None:
    """Two agents' sessions interleaved in one window: each part is extracted with its own author."""
    say(
        files,
        [
            ("s-code", "user", CODER, INSTRUCTION),
            ("s-help", "user", SUPPORT, FACT),
            ("s-code", "assistant", CODER, "Got it."),
            ("s-help", "assistant", SUPPORT, "That must be tiring."),
        ],
    )
    records = run(files, store)
    assert scopes_of(records) == {INSTRUCTION: "agent:coder", FACT: "shared"}
    rows = store.get("t", "u", [r.id for r in records])
    assert {r.text: r.scope for r in rows} == scopes_of(records)  # the index holds what the records say
    vector = EMB.embed([INSTRUCTION])[0]
    support = Viewer(agent="support", team="help").scopes()
    assert [h.row.text for h in store.search("t", "u", INSTRUCTION, vector, 5, visible=support)] == [FACT]
    coder = Viewer(agent="coder", team="eng").scopes()
    assert {h.row.text for h in store.search("t", "u", INSTRUCTION, vector, 5, visible=coder)} == {INSTRUCTION, FACT}


def test_what_an_agent_told_the_user_is_private_to_that_agent(files, store) -> None:
    answer = "Try Lina's on the corner of Mill Street, their carbonara is the best in town."
    say(
        files,
        [
            ("s-code", "user", CODER, "Can you recommend a good pasta place in Leeds?"),
            ("s-code", "assistant", CODER, answer),
        ],
    )
    (record,) = [r for r in run(files, store) if "carbonara" in r.content]
    assert record.content.startswith("Assistant: ") and record.scope == "agent:coder"


def test_a_turn_may_ask_for_its_team_or_to_share_with_everyone(files, store) -> None:
    say(
        files,
        [("s-code", "user", CODER, FACT), ("s-code", "user", CODER, INSTRUCTION)],
        visibility={0: "team", 1: "shared"},
    )
    assert scopes_of(run(files, store)) == {FACT: "team:eng", INSTRUCTION: "shared"}


def test_the_same_instruction_told_to_two_agents_is_two_atoms_and_the_same_fact_is_one(files, store) -> None:
    """Dedup never crosses a scope: each agent keeps its instruction; the shared fact is one atom for both."""
    say(
        files,
        [
            ("s-code", "user", CODER, FACT),
            ("s-help", "user", SUPPORT, FACT),
            ("s-code", "user", CODER, INSTRUCTION),
            ("s-help", "user", SUPPORT, INSTRUCTION),
        ],
    )
    records = run(files, store)
    assert sorted((r.content, r.scope) for r in records) == [
        (INSTRUCTION, "agent:coder"),
        (INSTRUCTION, "agent:support"),
        (FACT, "shared"),
    ]


def test_without_agents_every_atom_is_shared_with_the_id_it_had_before_scopes(files, store) -> None:
    default = Author()
    say(files, [("s", "user", default, INSTRUCTION), ("s", "user", default, FACT)])
    records = run(files, store)
    assert {r.scope for r in records} == {"shared"}
    (instruction,) = [r for r in records if r.type == "instruction"]
    before = "\x1f".join(["t", "u", "instruction", normalise(INSTRUCTION), "m0"])  # the key before scopes existed
    assert instruction.id == "a_" + hashlib.sha256(before.encode()).hexdigest()[:24]


def test_a_private_atoms_id_names_its_scope() -> None:
    """The same words from the same message in two scopes would otherwise be one row, visible in one of them."""
    draft = AtomDraft(content=INSTRUCTION, type="instruction", priority=90, source_message_ids=("m0",))
    ids = {draft.model_copy(update={"scope": s}).atom_id("t", "u") for s in ("shared", "agent:a", "agent:b")}
    assert len(ids) == 3


def _msg(i: int, author: Author, role: str = "user") -> L0Message:
    return L0Message(
        id=f"m{i}", session="s", role=role, content=f"message {i}", ts=T0, agent=author.agent, team=author.team
    )


def test_a_window_is_split_by_author_and_no_part_reads_another_authors_messages() -> None:
    b0, a0, a1, b1, a2 = _msg(0, SUPPORT), _msg(1, CODER), _msg(2, CODER), _msg(3, SUPPORT), _msg(4, CODER)
    window = Window(new=[a1, b1, a2], background=[b0, a0], done={"2026-02-01": 5}, consumed=3)
    parts = split_by_author(window)
    assert [(a, [m.id for m in w.new], [m.id for m in w.background]) for a, w in parts] == [
        (CODER, ["m2", "m4"], ["m1"]),
        (SUPPORT, ["m3"], ["m0"]),
    ]
    assert all(w.done == window.done and w.consumed == 3 for _, w in parts)
    alone = Window(new=[a1], background=[b0, a0])
    assert [(a, [m.id for m in w.background]) for a, w in split_by_author(alone)] == [(CODER, ["m1"])]
    same = Window(new=[a1, a2], background=[a0])
    assert split_by_author(same) == [(CODER, same)]
    assert split_by_author(Window(new=[], background=[a0])) == []


def test_a_draft_citing_several_messages_takes_the_narrowest_scope_they_give() -> None:
    fact = AtomDraft(content=FACT, type="persona", priority=70, source_message_ids=("m0", "m1"))
    shared, team = _msg(0, CODER), _msg(1, CODER).model_copy(update={"visibility": "team"})
    assert decide_scope(fact, [shared], CODER) == "shared"
    assert decide_scope(fact, [shared, team], CODER) == "team:eng"
    instruction = fact.model_copy(update={"type": "instruction"})
    assert decide_scope(instruction, [shared, team], CODER) == "agent:coder"
    assert decide_scope(instruction, [shared], Author(team="eng")) == "team:eng"  # a team key with no agent
    assert decide_scope(instruction, [shared], Author()) == "shared"  # the default agent


def _atom(text: str, scope: str, vector: list[float]) -> NewAtom:
    d = AtomDraft(content=text, type="persona", priority=60, source_message_ids=("m9",), scope=scope)
    return NewAtom(d.atom_id("t", "u"), d, vector)


def _row(i: int, text: str, scope: str, vector: list[float]) -> AtomRow:
    return AtomRow(
        id=f"old{i}",
        tenant="t",
        user="u",
        type="persona",
        priority=60,
        text=text,
        vector=vector,
        created=T0,
        updated=T0,
        scope=scope,
    )


def test_dedup_candidates_and_one_batch_stay_inside_one_scope(store) -> None:
    vector = EMB.embed(["Sam owns a red bike"])[0]
    store.upsert([_row(0, "Sam owns a red bike", "agent:coder", vector)])
    deduper = Deduper(store, HeuristicJudge(), DedupConfig(skip_similarity=0.9, store_below=0.5))
    plans = asyncio.run(
        deduper.plan(
            "t",
            "u",
            [
                _atom(
                    "Sam owns a red bike", "agent:support", vector
                ),  # the coder's identical atom is not its duplicate
                _atom("Sam owns a red bike", "shared", vector),  # nor is the support agent's one, in the same batch
                _atom("Sam owns a red bike", "agent:coder", vector),  # the coder's own is
            ],
        )
    )
    assert [p.action for p in plans] == ["store", "store", "skip"]


def test_a_decision_of_the_extraction_reply_may_target_only_atoms_of_the_same_scope(store) -> None:
    """The reply was shown a shared atom and one of the agent's own; it may update only the agent's own."""
    base = EMB.embed(["Sam prefers short answers in the morning"])[0]
    near = [x + 0.15 * y for x, y in zip(base, EMB.embed(["standup notes"])[0], strict=True)]
    own = _row(1, "Sam prefers short answers", "agent:coder", near)
    shared = _row(2, "Sam prefers mornings", "shared", near)
    store.upsert([own, shared])
    deduper = Deduper(store, HeuristicJudge(), DedupConfig(skip_similarity=0.999, store_below=0.5))
    new = _atom("Sam prefers short answers in the morning", "agent:coder", base)

    def decide(target: str) -> tuple[str, list[str]]:
        dec = DedupDecision(record_id=new.id, action="update", target_ids=[target])
        (plan,) = asyncio.run(deduper.plan("t", "u", [new], shown=[own, shared], proposed={new.id: dec}))
        return plan.action, [t.id for t in plan.targets]

    assert decide("old1") == ("update", ["old1"])
    assert decide("old2") == ("store", [])  # the shared atom is not the agent's to replace
    assert deduper.stats.rejected_targets == 1


class SceneSpy:
    """An extractor that names each part's scene after its agent and records the previous scene it was handed."""

    uses_llm = False

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, str]] = []

    async def extract(self, user: str, window: Window, previous_scene: str) -> list[AtomDraft]:
        first = window.new[0]
        self.seen.append((first.agent, previous_scene))
        return [
            AtomDraft(
                content=m.content,
                type="episodic",
                priority=50,
                source_message_ids=(m.id,),
                scene_name=f"{m.agent} scene",
            )
            for m in window.new
        ]


def test_an_agents_scene_name_is_handed_only_to_its_own_next_extraction(files, store) -> None:
    say(
        files,
        [
            ("s-code", "user", CODER, "I am refactoring the billing module today"),
            ("s-help", "user", SUPPORT, "I want a refund for my broken frother"),
            ("s-code", "user", CODER, "I renamed the invoice class"),
            ("s-help", "user", SUPPORT, "I sent the receipt by mail"),
        ],
    )
    spy = SceneSpy()
    pipeline = L1Pipeline(
        files=files,
        store=store,
        embedder=EMB,
        extractor=spy,
        judge=HeuristicJudge(),
        clock=ManualClock(T0 + timedelta(days=1)),
        settings=L1Settings(new_size=2, background=0),
    )
    assert asyncio.run(pipeline.run("t", "u")).windows == 2
    assert spy.seen == [("coder", ""), ("support", ""), ("coder", "coder scene"), ("support", "support scene")]
    cursor = load_cursor(files, "t", "u")
    assert (cursor.last_scene, cursor.scenes) == ("", {"agent:coder": "coder scene", "agent:support": "support scene"})


def test_remember_stores_in_its_scope_and_a_shared_one_is_the_operation_it_was_before_scopes(files, store) -> None:
    from mnemoflow.governance.atoms import AtomEditor
    from mnemoflow.governance.operations import Remember

    clock = ManualClock(T0)
    pipeline = L1Pipeline(
        files=files, store=store, embedder=EMB, extractor=HeuristicExtractor(), judge=HeuristicJudge(), clock=clock
    )
    editor = AtomEditor(files=files, store=store, embedder=EMB, clock=clock, pipeline=pipeline)
    shared = Remember(user="u", text=INSTRUCTION, type="instruction")
    assert shared.model_dump_json() == (
        f'{{"kind":"remember","user":"u","text":"{INSTRUCTION}","type":"instruction","priority":50}}'
    )
    private = shared.model_copy(update={"scope": "agent:coder"})
    assert asyncio.run(editor.remember("t", shared, "op1"))["action"] == "store"
    assert asyncio.run(editor.remember("t", private, "op2"))["action"] == "store"  # not a duplicate of the shared one
    assert sorted(r.scope for r in RecordLog(files, "t", "u").read()) == ["agent:coder", "shared"]
    rows = store.dense_search("t", "u", EMB.embed([INSTRUCTION])[0], 10)
    assert sorted(h.row.scope for h in rows) == ["agent:coder", "shared"]
