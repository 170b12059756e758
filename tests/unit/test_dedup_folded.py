"""Dedup decided inside the extraction call: one model call per window, the judge only for undecided atoms.

Contract tests with a scripted model: every action (store, update, merge, skip) decided in the extraction reply,
targets validated against the atoms the prompt showed, undecided atoms still judged, and honest call counts.
"""

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.events import TurnEvent
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1.dedup import DedupConfig, Deduper, LLMDedupJudge, NewAtom
from mnemoflow.memory.l1.extract import DecidingExtractor, LLMExtractor
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.models import AtomDraft, DedupDecision
from mnemoflow.memory.l1.pipeline import L1Pipeline, L1RunResult, L1Settings
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.prompts import l1_extraction
from mnemoflow.prompts.l1_dedup import DedupOut
from mnemoflow.prompts.l1_extraction import ExtractionOut, MemoryOut, SceneOut
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock, ScriptedCall, ScriptedLLM

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
EMB = HashingEmbedder(64)
OPEN = DedupConfig(store_below=0.0, skip_similarity=1.0)  # every atom with a candidate is open (no gate decision)


def mem(content: str, mid: str, **decision) -> MemoryOut:
    return MemoryOut(content=content, type="persona", priority=70, source_message_ids=[mid], **decision)


class World:
    def __init__(self, root: Path, config: DedupConfig = OPEN, extractor_llm: ScriptedLLM | None = None) -> None:
        self.files = LocalFileStore(root)
        self.store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
        self.extract_llm, self.judge_llm = extractor_llm or ScriptedLLM(), ScriptedLLM()  # no judge answers
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

    def turn(self, text: str) -> str:
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
        return mid

    def say(self, text: str, *memories) -> L1RunResult:
        """One user turn whose extraction reply holds ``memories`` (callables of the turn's message id)."""
        mid = self.turn(text)
        self.extract_llm.push(ExtractionOut(scenes=[SceneOut(scene_name="home", memories=[m(mid) for m in memories])]))
        return asyncio.run(self.pipeline.run("t", "u"))

    def live(self) -> list:
        return RecordLog(self.files, "t", "u").read()


def new_id(call: ScriptedCall) -> str:
    """The id of the first new memory as the judge's prompt shows it."""
    return call.messages[1].content.split("NEW 1: ")[1].split('"record_id": "')[1].split('"')[0]


def fact(content: str, **decision):
    return lambda mid: mem(content, mid, **decision)


def test_the_llm_extractor_decides_and_the_prompt_is_version_3() -> None:
    assert isinstance(LLMExtractor(ScriptedLLM()), DecidingExtractor)
    assert not isinstance(HeuristicExtractor(), DecidingExtractor)
    assert l1_extraction.VERSION == "l1-extraction/3"


def test_store_decided_in_the_extraction_reply_costs_one_call(tmp_path: Path) -> None:
    w = World(tmp_path)
    first = w.say("I like tea", fact("Sam likes green tea"))
    assert first.llm_calls == first.model_calls_needed == 1
    old = w.live()[0].id
    result = w.say("I play chess", fact("Sam likes chess", decision="store"))
    assert [r.content for r in w.live()] == ["Sam likes green tea", "Sam likes chess"]
    assert result.llm_calls == result.model_calls_needed == 1 and w.judge_llm.calls == []
    prompt = w.extract_llm.calls[1].messages[1].content
    assert "[#E1] (persona) Sam likes green tea" in prompt and old not in prompt  # shown by its label
    assert "[#1] [user]" in prompt and "m1" not in prompt
    stats = w.pipeline.deduper.stats
    assert stats.decided_in_extraction == 1 and stats.judge_calls_saved_by_extraction == 1
    assert stats.judge_calls == stats.model_judge_passes == 0


def test_skip_decided_in_the_extraction_reply(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.say("I like tea", fact("Sam likes green tea"))
    result = w.say("tea again", fact("Sam likes tea", decision="skip"))
    assert [r.content for r in w.live()] == ["Sam likes green tea"] and w.store.count("t", "u") == 1
    assert result.skipped == 1 and result.llm_calls == 1 and w.judge_llm.calls == []


def test_a_reply_citing_labels_links_the_ids_they_stand_for(tmp_path: Path) -> None:
    """The prompt shows #1 for the new message and #E1 for the stored memory; the reply's labels map back."""
    w = World(tmp_path)
    w.say("I live in Paris", fact("Sam lives in Paris"))
    old = w.live()[0].id
    w.turn("moved to Lyon")
    labelled = mem("Sam lives in Lyon", "#1", decision="update", target_ids=["#E1"], merged_content="Sam lives in Lyon")
    unknown = mem("Sam has a cat", "#7")  # no 7th message: dropped like an id outside the window
    w.extract_llm.push(ExtractionOut(scenes=[SceneOut(scene_name="home", memories=[labelled, unknown])]))
    result = asyncio.run(w.pipeline.run("t", "u"))
    live = w.live()
    assert [r.content for r in live] == ["Sam lives in Lyon"] and live[0].merged_from == [old]
    assert live[0].source_message_ids == ["m1", "m0"] and result.superseded == 1


@pytest.mark.parametrize("action", ["update", "merge"])
def test_update_and_merge_decided_in_the_extraction_reply(tmp_path: Path, action: str) -> None:
    w = World(tmp_path)
    w.say("I live in Paris", fact("Sam lives in Paris"))
    old = w.live()[0].id
    result = w.say(
        "moved to Lyon",
        fact(
            "Sam moved to Lyon",
            decision=action,
            target_ids=[old],
            merged_content="Sam lived in Paris, now lives in Lyon",
            merged_type="persona",
            merged_priority=85,
        ),
    )
    live = w.live()
    assert len(live) == 1 and live[0].content == "Sam lived in Paris, now lives in Lyon"
    assert live[0].action == action and live[0].merged_from == [old] and live[0].priority == 85
    assert live[0].source_message_ids == ["m1", "m0"] and len(live[0].timestamps) == 2  # provenance kept
    every = {r.id: r for r in RecordLog(w.files, "t", "u").read(live_only=False)}
    assert every[old].superseded_by == live[0].id and every[old].valid_to is not None
    assert w.store.get("t", "u", [old]) == []  # no stale fact stays searchable
    assert result.superseded == 1 and result.llm_calls == result.model_calls_needed == 1
    assert w.judge_llm.calls == []


def test_invalid_targets_are_dropped_and_an_update_without_valid_target_becomes_store(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.say("I live in Paris", fact("Sam lives in Paris"))
    old = w.live()[0].id
    w.say(
        "moved",
        fact("Sam moved to Lyon", decision="update", target_ids=["a_ghost", old], merged_content="Sam lives in Lyon"),
    )
    assert [r.content for r in w.live()] == ["Sam lives in Lyon"] and w.live()[0].merged_from == [old]
    w.say("coffee", fact("Sam likes coffee", decision="merge", target_ids=["a_not_shown"], merged_content="x"))
    assert [r.content for r in w.live()] == ["Sam lives in Lyon", "Sam likes coffee"]  # became a store
    assert w.pipeline.deduper.stats.rejected_targets == 2 and w.judge_llm.calls == []


def test_atoms_left_undecided_still_go_to_the_judge_and_are_counted(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.say("I like tea", fact("Sam likes green tea"))
    w.judge_llm.push(
        lambda call: DedupOut(decisions=[DedupDecision(record_id=new_id(call), action="skip", target_ids=[])])
    )
    result = w.say("tea and chess", fact("Sam likes tea", decision="skip"), fact("Sam likes tea and chess"))
    judged = w.judge_llm.calls
    assert len(judged) == 1 and "NEW 2" not in judged[0].messages[1].content  # only the undecided atom
    assert "Sam likes tea and chess" in judged[0].messages[1].content
    assert [r.content for r in w.live()] == ["Sam likes green tea"] and result.skipped == 2
    assert result.llm_calls == result.model_calls_needed == 2  # extraction + the judge call still needed
    stats = w.pipeline.deduper.stats
    assert stats.decided_in_extraction == 1 and stats.judge_passes == stats.model_judge_passes == 1


def test_the_gate_still_decides_first(tmp_path: Path) -> None:
    w = World(tmp_path, DedupConfig(store_below=0.999, skip_similarity=1.0))
    w.say("I like tea", fact("Sam likes green tea"))
    old = w.live()[0].id
    result = w.say("chess", fact("Sam plays chess on Sundays", decision="update", target_ids=[old], merged_content="x"))
    assert [r.content for r in w.live()] == ["Sam likes green tea", "Sam plays chess on Sundays"]
    assert result.superseded == 0 and w.pipeline.deduper.stats.gated_store == 2


def test_a_decision_made_without_seeing_the_closest_candidate_is_judged(tmp_path: Path) -> None:
    w = World(tmp_path, OPEN.model_copy(update={"shown": 0}))  # the prompt shows no candidate
    w.say("I like tea", fact("Sam likes green tea"))
    w.judge_llm.push(DedupOut(decisions=[]))  # missing decision: store
    result = w.say("coffee", fact("Sam likes coffee", decision="skip"))
    assert len(w.judge_llm.calls) == 1 and len(w.live()) == 2
    assert result.llm_calls == result.model_calls_needed == 2
    assert "(none: every memory is store)" in w.extract_llm.calls[1].messages[1].content


def test_one_model_call_per_window_over_a_backlog(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.say("I like tea", fact("Sam likes green tea"))
    old = w.live()[0].id
    for text in ("tea", "more tea", "chess"):
        w.turn(text)
    replies = [
        [mem("Sam likes tea", "m1", decision="skip")],
        [mem("Sam loves green tea", "m2", decision="merge", target_ids=[old], merged_content="Sam loves tea")],
        [mem("Sam plays chess", "m3", decision="store")],
    ]
    w.extract_llm.push(*[ExtractionOut(scenes=[SceneOut(scene_name="s", memories=r)]) for r in replies])
    w.pipeline.settings = L1Settings(new_size=1)
    result = asyncio.run(w.pipeline.run("t", "u"))
    assert result.windows == 3 and result.llm_calls == result.model_calls_needed == 3
    assert (result.skipped, result.merged, result.stored) == (1, 1, 1) and w.judge_llm.calls == []
    assert sorted(r.content for r in w.live()) == ["Sam loves tea", "Sam plays chess"]


def test_re_running_decided_windows_adds_nothing(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.say("I like tea", fact("Sam likes green tea"))
    w.say("chess", fact("Sam plays chess", decision="store"))
    before = len(RecordLog(w.files, "t", "u").read(live_only=False))
    w.files.write_atomic("t/users/u/state/l1_cursor.json", b"{}")
    w.extract_llm.push(
        ExtractionOut(
            scenes=[
                SceneOut(
                    scene_name="home",
                    memories=[
                        mem("Sam likes green tea", "m0", decision="store"),
                        mem("Sam plays chess", "m1", decision="store"),
                    ],
                )
            ]
        )
    )
    again = asyncio.run(w.pipeline.run("t", "u"))
    assert again.stored == 0 and again.skipped == 2  # the id gate runs before any decision
    assert len(RecordLog(w.files, "t", "u").read(live_only=False)) == before


def test_heuristic_engine_counts_what_a_model_engine_would_need(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    p = L1Pipeline(
        files=files,
        store=store,
        embedder=EMB,
        extractor=HeuristicExtractor(),
        judge=HeuristicJudge(),
        clock=ManualClock(T0 + timedelta(days=1)),
        dedup=OPEN,
        settings=L1Settings(count_model_calls=True),
    )
    for i, text in enumerate(["Sam owns a bike and rides it daily.", "Sam owns a red bike and rides it daily."]):
        L0Writer(files).write(
            [
                TurnEvent(
                    tenant="t",
                    message_id=f"m{i}",
                    user="u",
                    session="s",
                    role="user",
                    content=text,
                    ts=T0 + timedelta(minutes=i),
                )
            ]
        )
        result = asyncio.run(p.run("t", "u"))
    stats = p.deduper.stats
    assert result.llm_calls == 0 and stats.judge_passes == 1  # the heuristic judge still decides
    assert stats.model_judge_passes == 0 and result.model_calls_needed == 1  # a model was shown the candidate


def test_deduper_without_shown_candidates_counts_every_judged_pass_for_a_model() -> None:
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    d0 = AtomDraft(content="Sam owns a bike", type="persona", priority=60, source_message_ids=("m0",))
    deduper = Deduper(store, HeuristicJudge(), OPEN)
    asyncio.run(deduper.plan("t", "u", []))
    store.upsert([L1Pipeline.row("t", "u", _record(d0), EMB.embed([d0.content])[0])])
    d1 = AtomDraft(content="Sam owns a red bike", type="persona", priority=60, source_message_ids=("m1",))
    plans = asyncio.run(deduper.plan("t", "u", [NewAtom(d1.atom_id("t", "u"), d1, EMB.embed([d1.content])[0])]))
    assert plans[0].action == "update" and deduper.stats.judge_passes == deduper.stats.model_judge_passes == 1


def _record(d: AtomDraft):
    from mnemoflow.memory.l1.models import L1Record

    return L1Record(
        id=d.atom_id("t", "u"),
        content=d.content,
        type=d.type,
        priority=d.priority,
        source_message_ids=list(d.source_message_ids),
        timestamps=[T0],
        created=T0,
        updated=T0,
    )


def test_shown_candidates_interleave_the_best_hits_of_each_user_message() -> None:
    from mnemoflow.ports.vectors import AtomRow

    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    texts = ["Sam likes green tea", "Sam likes black tea", "Sam plays chess on Sundays"]
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
    deduper = Deduper(store, HeuristicJudge(), OPEN.model_copy(update={"shown": 2}))
    queries = ["I like green tea a lot", "chess on Sundays"]
    shown = deduper.shown("t", "u", list(zip(queries, EMB.embed(queries), strict=True)))
    assert [r.id for r in shown] == ["old0", "old2"]  # each message's best hit, not two tea atoms
    assert deduper.shown("t", "other", list(zip(queries, EMB.embed(queries), strict=True))) == []
