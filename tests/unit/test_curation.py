"""Curator: L1 done → wake-up → L2/L3 run; cursor, supersession, failure and restart behaviour; the actor class."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from actors.curator import UserCurator
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.errors import ServiceUnavailable, StorageError
from mnemoflow.memory.curation import CurationState, Curator
from mnemoflow.memory.l1.models import L1Record
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.persona.generate import MAX_PERSONA_CHARS, PersonaStore
from mnemoflow.memory.persona.heuristic import HeuristicPersonaEngine
from mnemoflow.memory.persona.llm import LLMPersonaEngine
from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine
from mnemoflow.memory.scenes.llm import LLMSceneEngine
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.memory.scenes.schedule import L2Timing
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.prompts.persona import PersonaReply
from mnemoflow.prompts.scenes import SceneReply
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock, ScriptedLLM

T0 = datetime(2025, 3, 1, tzinfo=UTC)
TOPICS = [
    "hiking in the alps with a tent",
    "learning to play jazz piano chords",
    "python rust compiler work",
    "cooking italian pasta at home",
    "training for a city marathon",
    "reading science fiction novels",
]


def rec(i: int, text: str, at: datetime, kind: str = "episodic") -> L1Record:
    return L1Record(
        id=f"a{i}",
        content=text,
        type=kind,
        priority=50,
        source_message_ids=[f"m{i}"],  # type: ignore[arg-type]
        timestamps=[at],
        created=at,
        updated=at,
    )


def write(files: LocalFileStore, records: list[L1Record], supersede: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
    RecordLog(files, "acme", "alice").append(records, list(supersede), records[-1].updated if records else T0)


class Spy:
    """Wraps a scene engine and records the atom ids of every window it is asked to plan."""

    def __init__(self, inner, fail: Exception | None = None) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.fail, self.seen = inner, fail, []  # type: ignore[var-annotated]
        self.name, self.rejection_retries = inner.name, inner.rejection_retries

    async def plan(self, scenes, atoms, now, policy, feedback=None):  # type: ignore[no-untyped-def]
        if self.fail is not None:
            raise self.fail
        self.seen.append([a.id for a in atoms])
        return await self.inner.plan(scenes, atoms, now, policy, feedback)


@pytest.fixture
def env(tmp_path: Path):  # type: ignore[no-untyped-def]
    files, clock = LocalFileStore(tmp_path), ManualClock(T0)
    spy = Spy(HeuristicSceneEngine(HashingEmbedder()))
    return files, clock, spy, Curator(files, clock, spy, HeuristicPersonaEngine(), L2Timing())


def many(n: int, start: int = 0) -> list[L1Record]:
    return [
        rec(
            i, f"{TOPICS[i % len(TOPICS)]} note {i}", T0 + timedelta(seconds=i), "persona" if i % 7 == 0 else "episodic"
        )
        for i in range(start, start + n)
    ]


def test_l1_done_wakeup_run_bounds_scenes_and_persona(env) -> None:  # type: ignore[no-untyped-def]
    files, clock, spy, cur = env
    write(files, many(60))
    clock.advance(60)
    wake = cur.on_l1_done("acme", "alice")
    assert wake == clock.now() + timedelta(seconds=10)
    assert asyncio.run(cur.run_due("acme", "alice")) is None  # not due yet
    clock.advance(10)
    out = asyncio.run(cur.run_due("acme", "alice"))
    assert out is not None and out.status == "applied" and out.error is None
    assert out.atoms == 60 and out.passes == 3  # windows of 20
    assert 1 <= len(SceneStore(files, "acme", "alice").load()) <= 15
    assert out.persona == "generated"
    body = PersonaStore(files, "acme", "alice").read_body()
    assert 0 < len(body) <= MAX_PERSONA_CHARS
    assert out.next_wakeup == clock.now() + L2Timing().max_interval
    state = cur.load("acme", "alice")
    assert state.cursor.ts == T0 + timedelta(seconds=59) and state.cursor.ids == ("a59",)
    assert state.timer.pending_l1 == 0 and state.persona.total_processed == 60
    assert asyncio.run(cur.run_due("acme", "alice")) is None


def test_llm_engines_through_scripted_model(tmp_path: Path) -> None:
    files, clock = LocalFileStore(tmp_path), ManualClock(T0)
    write(files, many(3))
    scene = SceneReply.model_validate(
        {
            "edits": [
                {
                    "action": "create",
                    "filename": "Outdoor Life",
                    "sources": [],
                    "summary": "hiking",
                    "body": "## core narrative\nhikes",
                    "atom_ids": ["a0", "a1", "a2"],
                }
            ]
        }
    )
    rnd = random.Random(7)  # varied text with no numbers: a loop or an invented number would be refused
    lines = ["- line " + "".join(rnd.choice("abcdefghij klmnop") for _ in range(64)) for _ in range(28)]
    long_body = "# Persona\nHikes.\n" + "\n".join(lines)  # ~2,000 chars, a word of its scene
    llm = ScriptedLLM([scene, PersonaReply(persona=long_body[:MAX_PERSONA_CHARS])])
    cur = Curator(files, clock, LLMSceneEngine(llm), LLMPersonaEngine(llm))
    out = asyncio.run(cur.run_now("acme", "alice"))
    assert out.status == "applied" and out.created == ("outdoor-life.md",) and out.persona == "generated"
    assert [c.stage for c in llm.calls] == ["l2_scenes", "l3_persona"]
    text = PersonaStore(files, "acme", "alice").read()
    assert len(PersonaStore(files, "acme", "alice").read_body()) <= MAX_PERSONA_CHARS
    assert "### Path: scenes/outdoor-life.md" in text
    assert PersonaStore(files, "acme", "alice").written_by() == "llm" and text.startswith("<!-- engine: llm -->\n")
    assert SceneStore(files, "acme", "alice").load()["outdoor-life.md"].engine == "llm"


def test_superseded_records_are_not_fed_and_cursor_skips_consumed(env) -> None:  # type: ignore[no-untyped-def]
    files, clock, spy, cur = env
    write(files, [rec(1, "likes green tea", T0), rec(2, "lives in Lyon", T0)])
    write(files, [rec(3, "likes black coffee now", T0 + timedelta(seconds=5))], [("a1", "a3")])
    out = asyncio.run(cur.run_now("acme", "alice"))
    assert out.status == "applied" and spy.seen == [["a2", "a3"]]
    # a record written later with the same timestamp as the cursor is still picked up; consumed ones are not
    write(
        files,
        [rec(4, "plays chess at the club", T0 + timedelta(seconds=5)), rec(5, "runs daily", T0 + timedelta(seconds=9))],
    )
    asyncio.run(cur.run_now("acme", "alice"))
    assert spy.seen[-1] == ["a4", "a5"]
    asyncio.run(cur.run_now("acme", "alice"))  # nothing new: skipped, no window
    assert len(spy.seen) == 2


def test_failing_engine_leaves_state_and_next_run_catches_up(env) -> None:  # type: ignore[no-untyped-def]
    files, clock, spy, cur = env
    write(files, many(10))
    cur.on_l1_done("acme", "alice")
    path = ScenePaths("acme", "alice").state
    before = files.read_bytes(path)
    spy.fail = ServiceUnavailable("model down")
    clock.advance(10)
    out = asyncio.run(cur.run_due("acme", "alice"))
    assert out is not None and out.status == "failed" and "model down" in (out.error or "")
    assert files.read_bytes(path) == before  # nothing advanced
    assert out.next_wakeup == clock.now() + timedelta(seconds=30)
    assert SceneStore(files, "acme", "alice").load() == {}
    spy.fail = StorageError("disk")
    assert asyncio.run(cur.run_due("acme", "alice")).next_wakeup == clock.now() + timedelta(seconds=60)  # backoff
    spy.fail = None
    write(files, many(5, start=10))
    clock.advance(60)
    out = asyncio.run(cur.run_due("acme", "alice"))
    assert out is not None and out.status == "applied" and out.atoms == 15
    assert cur.load("acme", "alice").persona.total_processed == 15


def test_failing_persona_keeps_the_l2_step(tmp_path: Path) -> None:
    class Broken:
        name = "broken"
        every_n = None

        async def write(self, ctx):  # type: ignore[no-untyped-def]
            raise ServiceUnavailable("persona model down")

    files, clock = LocalFileStore(tmp_path), ManualClock(T0)
    write(files, many(6))
    cur = Curator(files, clock, HeuristicSceneEngine(HashingEmbedder()), Broken())  # type: ignore[arg-type]
    out = asyncio.run(cur.run_now("acme", "alice"))
    assert out.status == "applied" and out.persona == "failed" and "persona model down" in (out.error or "")
    state = cur.load("acme", "alice")
    assert state.cursor.ts is not None and state.persona.last_persona_time is None  # retried on the next trigger


def test_restart_continues_from_persisted_cursor(env) -> None:  # type: ignore[no-untyped-def]
    files, clock, spy, cur = env
    write(files, many(10))
    asyncio.run(cur.run_now("acme", "alice"))
    spy2 = Spy(HeuristicSceneEngine(HashingEmbedder()))
    cur2 = Curator(files, clock, spy2, HeuristicPersonaEngine())
    write(files, many(4, start=10))
    clock.advance(3600)
    cur2.on_l1_done("acme", "alice")
    clock.advance(900)
    out = asyncio.run(cur2.run_due("acme", "alice"))
    assert out is not None and out.status == "applied" and spy2.seen == [["a10", "a11", "a12", "a13"]]


def test_unreadable_state_is_reported_not_reset(env) -> None:  # type: ignore[no-untyped-def]
    files, clock, spy, cur = env
    files.write_atomic(ScenePaths("acme", "alice").state, b"{not json")
    out = asyncio.run(cur.run_now("acme", "alice"))
    assert out.status == "failed" and "unreadable" in (out.error or "")


def test_user_curator_class_ticks_due_users_without_ray(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    files = LocalFileStore(tmp_path)
    write(files, many(8))

    async def scenario() -> tuple[int, int, dict]:  # type: ignore[type-arg]
        actor = UserCurator(0, 1, str(tmp_path), tick_seconds=3600, clock=clock)
        reply = await actor.after_l1("acme", "alice")
        assert reply["next_wakeup"] == (T0 + timedelta(seconds=10)).isoformat()
        early = await actor.tick()
        clock.advance(10)
        ran = await actor.tick()
        # a fresh actor (restart) finds the scheduled user by scanning the files
        again = UserCurator(0, 1, str(tmp_path), tick_seconds=3600, clock=clock)
        await again.tick()
        return early, ran, again.stats()

    early, ran, stats = asyncio.run(scenario())
    assert (early, ran) == (0, 1)
    assert stats["users_scheduled"] == 1 and stats["scanned_users"] == 1
    assert CurationState.model_validate_json(files.read_bytes(ScenePaths("acme", "alice").state) or b"").cursor.ts


def test_the_models_scene_body_is_bounded_in_its_schema_by_what_a_reader_sees() -> None:
    """A stored body may hold atom-id links past MAX_SCENE_CHARS; the model writes none, so its grammar stops at
    the reader's bound instead of letting it write a body validation would then reject."""
    from mnemoflow.memory.scenes.model import MAX_SCENE_CHARS

    edit = SceneReply.model_json_schema()["$defs"]["ModelSceneEdit"]
    assert edit["properties"]["body"]["maxLength"] == MAX_SCENE_CHARS


def test_the_curator_runs_scenes_or_persona_on_the_model_only_when_they_are_model_stages(tmp_path: Path) -> None:
    from actors.curator import UserCurator
    from mnemoflow.memory.persona.llm import LLMPersonaEngine
    from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine
    from mnemoflow.testing import ScriptedLLM

    curator = UserCurator(0, 1, str(tmp_path), llm=ScriptedLLM(), model_stages=["persona"]).curator
    assert isinstance(curator.scene_engine, HeuristicSceneEngine)
    assert isinstance(curator.persona_engine, LLMPersonaEngine)


def test_replies_invalid_after_the_repair_try_fall_back_to_the_heuristic_engines(tmp_path: Path) -> None:
    """Issue 28: with the model failing every reply, the pass still writes scenes and a persona (the heuristics'),
    and each stage counts one fallback."""
    files, clock = LocalFileStore(tmp_path), ManualClock(T0)
    write(files, many(3))
    llm = ScriptedLLM(["not json"] * 4)
    scenes = LLMSceneEngine(llm, fallback=HeuristicSceneEngine(HashingEmbedder()))
    cur = Curator(files, clock, scenes, LLMPersonaEngine(llm, fallback=HeuristicPersonaEngine()))
    out = asyncio.run(cur.run_now("acme", "alice"))
    assert out.status == "applied" and out.created and out.persona == "generated"
    assert [c.stage for c in llm.calls] == ["l2_scenes"] * 2 + ["l3_persona"] * 2
    assert llm.usage.stage("l2_scenes").fallbacks == llm.usage.stage("l3_persona").fallbacks == 1
    assert "### Path: scenes/" in PersonaStore(files, "acme", "alice").read()


def test_a_scene_reply_with_no_edit_is_invalid_asked_again_then_falls_back(tmp_path: Path) -> None:
    """Small models answered new memories with an empty plan: the reply's schema asks for at least one edit (so a
    grammar-constrained decoder cannot write none), a reply without is repaired once, then the heuristic engine
    writes the scenes, so the memories still reach L2."""
    files, clock = LocalFileStore(tmp_path), ManualClock(T0)
    write(files, many(3))
    empty = '{"edits": [], "persona_update_reason": null}'
    llm = ScriptedLLM([empty, empty, PersonaReply(persona="# Persona\n- hikes")])
    scenes = LLMSceneEngine(llm, fallback=HeuristicSceneEngine(HashingEmbedder()))
    out = asyncio.run(Curator(files, clock, scenes, LLMPersonaEngine(llm)).run_now("acme", "alice"))
    assert out.status == "applied" and out.created
    assert SceneReply.model_json_schema()["properties"]["edits"]["minItems"] == 1
    assert [c.stage for c in llm.calls] == ["l2_scenes", "l2_scenes", "l3_persona"]  # the repair try, then none
    assert llm.usage.stage("l2_scenes").fallbacks == 1
    assert {b.engine for b in SceneStore(files, "acme", "alice").load().values()} == {"heuristic"}


def test_a_scene_that_cites_no_new_memory_is_asked_again_with_why(tmp_path: Path) -> None:
    """Qwen2.5 0.5B created "scene1.txt" holding an assistant's reply and no atom id: the new memories would never
    reach L2. The reply is refused with the reason; the model's second reply, citing them, is written as its own."""
    files, clock = LocalFileStore(tmp_path), ManualClock(T0)
    write(files, many(2))

    def create(atom_ids: list[str]) -> str:
        edit = {"action": "create", "filename": "hiking", "sources": [], "summary": "hiking", "atom_ids": atom_ids}
        return json.dumps({"edits": [{**edit, "body": "## core narrative\nhikes"}], "persona_update_reason": None})

    llm = ScriptedLLM([create([]), create(["a0", "a1"]), PersonaReply(persona="# Persona\n- hikes")])
    out = asyncio.run(Curator(files, clock, LLMSceneEngine(llm), LLMPersonaEngine(llm)).run_now("acme", "alice"))
    assert out.status == "applied" and out.created == ("hiking.md",)
    assert "no edit lists any of the 2 new memories" in llm.calls[1].messages[-1].content
    block = SceneStore(files, "acme", "alice").load()["hiking.md"]
    assert block.engine == "llm" and block.atom_ids == ("a0", "a1")


def test_each_scope_has_scenes_and_a_persona_of_its_own_atoms_only(env) -> None:  # type: ignore[no-untyped-def]
    """Shared, an agent's and a team's atoms are curated apart (docs/concepts/scopes.md): no engine call sees two
    scopes' atoms, the shared files hold no private atom, and each private scope's files are under its folder."""
    files, clock, spy, cur = env
    private = rec(2, "prefers tabs over spaces in python", T0).model_copy(update={"scope": "agent:coder"})
    team = rec(3, "on call rota for the payments team", T0).model_copy(update={"scope": "team:eng"})
    write(files, [rec(1, "lives in Lyon and likes green tea", T0), private, team])
    out = asyncio.run(cur.run_now("acme", "alice"))
    assert out.status == "applied" and spy.seen == [["a1"], ["a2"], ["a3"]]  # shared first, then by scope
    personas = {s: PersonaStore(files, "acme", "alice", s).read_body() for s in ("shared", "agent:coder", "team:eng")}
    assert "Lyon" in personas["shared"] and "tabs" not in personas["shared"] and "rota" not in personas["shared"]
    assert "tabs" in personas["agent:coder"] and "Lyon" not in personas["agent:coder"]
    assert "rota" in personas["team:eng"] and "tabs" not in personas["team:eng"]
    coder = SceneStore(files, "acme", "alice", "agent:coder").load()
    assert [b.atom_ids for b in coder.values()] == [("a2",)]
    assert all(f.startswith(("agent:coder/", "team:eng/")) or "/" not in f for f in out.scene_files)
    assert files.exists("acme/users/alice/agents/coder/persona.md")
    assert set(cur.load("acme", "alice").scopes) == {"agent:coder", "team:eng"}

    RecordLog(files, "acme", "alice").delete(["a2"], T0 + timedelta(hours=1), "op-forget")  # the coder is forgotten
    clock.advance(timedelta(hours=2))
    asyncio.run(cur.run_now("acme", "alice"))
    assert not files.exists("acme/users/alice/agents/coder/persona.md")
    assert files.list_dir("acme/users/alice/agents") == [] and set(cur.load("acme", "alice").scopes) == {"team:eng"}
    assert "Lyon" in PersonaStore(files, "acme", "alice").read_body()  # the shared memory is untouched
