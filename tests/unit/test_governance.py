"""Memory operations applied inline through the commands handler, over real files and a real SQLite index.

Covers what issue 10 asks of the core: edit / delete / remember with history, idempotence by operation id, the
erase of a user with its tombstone (byte search of the data directory and of the index file), export/import and
reindex giving the same recall.
"""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mnemoflow.config import TOPIC_COMMANDS
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.errors import InvalidInput
from mnemoflow.events import ToolResultEvent, TurnEvent
from mnemoflow.governance.applier import OperationApplier
from mnemoflow.governance.bundle import BundleImporter, export_user
from mnemoflow.governance.listing import AtomFilter, history, page
from mnemoflow.governance.operations import (
    DeleteAtom,
    EraseSession,
    EraseUser,
    OperationEvent,
    PatchAtom,
    Remember,
)
from mnemoflow.governance.reindex import reindex_user
from mnemoflow.governance.status import OperationLog
from mnemoflow.handlers import (
    CommandsHandler,
    HandlerContext,
    RawRecord,
    ToolResultsHandler,
    TurnsHandler,
    WriterThread,
)
from mnemoflow.index.sqlite import SqliteVectorStore
from mnemoflow.index.sqlite_scrub import scrub_sqlite_index
from mnemoflow.memory.l0 import read_l0
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.retry import RetryPolicy
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock, files_holding

EMB = HashingEmbedder(64)
T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
ANA = [
    "I am a glassblower living in Quixotevale and I keep a pet axolotl named Zorblatt",
    "Please always answer me in Portuguese, my favourite tea is Xanthoria oolong",
    "My daughter Pemberwick starts violin lessons next Tuesday",
    "I work night shifts at the Flimmerdorf observatory",
]
BEN = ["I am a beekeeper and I love the Grundleford marathon", "Always call me Captain Benthos please"]
ANA_MARKERS = [b"Zorblatt", b"Quixotevale", b"Xanthoria", b"Pemberwick", b"Flimmerdorf", b"ana-secret-output"]


class Stack:
    """The write path of one worker and one extractor, inline: handlers, pipeline, applier."""

    def __init__(self, root: Path, tenant: str = "acme") -> None:
        self.root, self.tenant = root, tenant
        self.clock = ManualClock(T0)
        self.files = LocalFileStore(root)
        (root / "index").mkdir(parents=True, exist_ok=True)
        self.index = str(root / "index" / "atoms.sqlite")
        self.store = SqliteVectorStore.open(self.index, dim=EMB.dim, embedding_model=EMB.model_id)
        self.pipeline = L1Pipeline(
            files=self.files,
            store=self.store,
            embedder=EMB,
            extractor=HeuristicExtractor(),
            judge=HeuristicJudge(),
            clock=self.clock,
        )
        self.applier = OperationApplier.over(
            files=self.files,
            store=self.store,
            embedder=EMB,
            clock=self.clock,
            pipeline=self.pipeline,
            scrub=lambda: scrub_sqlite_index(self.index),
        )
        ctx = HandlerContext(self.clock, RetryPolicy(attempts=2, base_delay=0.01), WriterThread())
        self.turns = TurnsHandler(ctx, self.files)
        self.tools = ToolResultsHandler(ctx, self.files)
        self.commands = CommandsHandler(ctx, self.files, self.applier.apply)
        self.offset = 0

    def raw(self, model: Any, topic: str = TOPIC_COMMANDS) -> RawRecord:
        self.offset += 1
        return RawRecord(model.model_dump_json().encode(), b"k", topic, 0, self.offset)

    def say(self, user: str, texts: list[str], session: str, at: datetime = T0) -> list[TurnEvent]:
        events = [
            TurnEvent(
                tenant=self.tenant,
                message_id=f"{user}-{session}-{i}",
                user=user,
                session=session,
                role="user",
                content=t,
                ts=at + timedelta(minutes=i),
            )
            for i, t in enumerate(texts)
        ]
        asyncio.run(self.turns.handle([self.raw(e) for e in events]))
        asyncio.run(self.pipeline.run(self.tenant, user))
        return events

    def tool(self, session: str, call: str, content: str) -> ToolResultEvent:
        event = ToolResultEvent(
            tenant=self.tenant,
            tool_call_id=call,
            session=session,
            tool_name="bash",
            arguments="{}",
            content=content,
            ts=T0,
        )
        asyncio.run(self.tools.handle([self.raw(event)]))
        return event

    def apply(self, op: Any, oid: str) -> OperationEvent:
        event = OperationEvent(tenant=self.tenant, operation_id=oid, op=op, submitted_at=self.clock.now())
        outcome = asyncio.run(self.commands.handle([self.raw(event)]))
        assert not outcome.parked, outcome.parked
        return event

    def status(self, oid: str) -> Any:
        return OperationLog(self.files).get(self.tenant, oid)

    def top(self, user: str, query: str, k: int = 10) -> list[str]:
        return [h.id for h in self.store.search(self.tenant, user, query, EMB.embed_query([query])[0], k)]


@pytest.fixture
def stack(tmp_path: Path) -> Stack:
    s = Stack(tmp_path / "data")
    s.say("ana", ANA, "s-ana")
    s.say("ben", BEN, "s-ben")
    s.tool("s-ana", "c1", "ana-secret-output: Zorblatt ate the crickets")
    s.tool("s-ben", "c2", "ben output: hives are fine")
    return s


def live(s: Stack, user: str) -> list[Any]:
    return RecordLog(s.files, s.tenant, user).read()


def test_edit_makes_a_new_manual_version_with_provenance_and_history(stack: Stack) -> None:
    old = next(r for r in live(stack, "ana") if "axolotl" in r.content)
    stack.clock.advance(60)
    stack.apply(
        PatchAtom(user="ana", atom_id=old.id, text="Ana keeps an axolotl called Zorblatt II", priority=90), "op-edit"
    )
    status = stack.status("op-edit")
    assert status.status == "applied" and status.result["supersedes"] == old.id
    new = next(r for r in live(stack, "ana") if r.id == status.result["atom_id"])
    assert (new.content, new.priority, new.origin, new.action) == (
        "Ana keeps an axolotl called Zorblatt II",
        90,
        "manual",
        "edit",
    )
    assert new.source_message_ids == old.source_message_ids and new.type == old.type
    assert old.id not in {r.id for r in live(stack, "ana")}
    assert stack.top("ana", "axolotl Zorblatt II")[0] == new.id
    assert stack.store.get("acme", "ana", [old.id]) == []
    versions = history(RecordLog(stack.files, "acme", "ana").read(live_only=False), old.id)
    assert [(v.record.id, v.made_by, v.event) for v in versions] == [
        (old.id, "extraction", "store"),
        (new.id, "manual", "edit"),
    ]


def test_an_operation_is_applied_once_and_its_id_cannot_carry_another_body(stack: Stack) -> None:
    atom = live(stack, "ana")[0]
    event = stack.apply(PatchAtom(user="ana", atom_id=atom.id, priority=7), "op-1")
    before = sorted(p.read_bytes() for p in (stack.root / "acme/users/ana/records").iterdir())
    again = asyncio.run(stack.commands.handle([stack.raw(event)]))  # Kafka re-delivers it
    assert not again.parked
    assert sorted(p.read_bytes() for p in (stack.root / "acme/users/ana/records").iterdir()) == before
    other = OperationEvent(
        tenant="acme", operation_id="op-1", op=DeleteAtom(user="ana", atom_id=atom.id), submitted_at=T0
    )
    parked = asyncio.run(stack.commands.handle([stack.raw(other)])).parked
    assert len(parked) == 1 and "another body" in parked[0].reason
    assert stack.status("op-1").kind == "patch_atom"


def test_delete_removes_from_index_and_listing_and_shows_in_history(stack: Stack) -> None:
    atom = next(r for r in live(stack, "ana") if "violin" in r.content)
    stack.apply(DeleteAtom(user="ana", atom_id=atom.id), "op-del")
    assert stack.status("op-del").result["index_rows_removed"] == 1
    assert atom.id not in stack.top("ana", "violin lessons Pemberwick")
    assert atom.id not in {
        r.id for r in page(RecordLog(stack.files, "acme", "ana").read(False), AtomFilter(), 100, None).atoms
    }
    versions = history(RecordLog(stack.files, "acme", "ana").read(live_only=False), atom.id)
    assert [v.event for v in versions] == ["store", "delete"]
    stack.apply(PatchAtom(user="ana", atom_id=atom.id, priority=3), "op-late-edit")
    failed = stack.status("op-late-edit")
    assert failed.status == "failed" and "deleted" in failed.reason


def test_unknown_atom_fails_with_the_reason(stack: Stack) -> None:
    stack.apply(DeleteAtom(user="ana", atom_id="a_nope"), "op-x")
    status = stack.status("op-x")
    assert status.status == "failed" and "no atom a_nope" in status.reason


def test_remember_goes_through_the_gate_and_a_repeat_is_skipped(stack: Stack) -> None:
    stack.apply(Remember(user="ana", text="Ana is allergic to hazelnuts", type="persona", priority=80), "op-r1")
    first = stack.status("op-r1").result
    assert first["action"] == "store"
    rec = next(r for r in live(stack, "ana") if r.id == first["atom_id"])
    assert rec.origin == "manual" and rec.operation_id == "op-r1" and rec.source_message_ids == []
    assert stack.top("ana", "hazelnuts allergy")[0] == rec.id
    stack.apply(Remember(user="ana", text="Ana is allergic to hazelnuts", type="persona", priority=80), "op-r2")
    assert stack.status("op-r2").result["action"] == "skip"
    assert sum(1 for r in live(stack, "ana") if "hazelnuts" in r.content) == 1


def test_listing_filters_and_pages(stack: Stack) -> None:
    records = RecordLog(stack.files, "acme", "ana").read(False)
    everything = page(records, AtomFilter(), 1000, None).atoms
    first = page(records, AtomFilter(), 2, None)
    rest = page(records, AtomFilter(), 1000, first.next_cursor)
    assert [r.id for r in first.atoms + rest.atoms] == [r.id for r in everything] and rest.next_cursor is None
    assert all("violin" in r.content.lower() for r in page(records, AtomFilter(text="VIOLIN"), 10, None).atoms)
    kinds = {r.type for r in everything}
    for kind in kinds:
        assert {r.type for r in page(records, AtomFilter(type=kind), 100, None).atoms} == {kind}


def test_erasing_a_user_leaves_no_byte_of_their_turns_and_old_events_do_not_bring_them_back(stack: Stack) -> None:
    assert files_holding(stack.root, ANA_MARKERS)  # the check can see them while they are there
    stack.clock.advance(3600)
    stack.apply(EraseUser(user="ana"), "op-erase")
    status = stack.status("op-erase")
    assert status.status == "applied" and status.result["sessions_erased"] == 1
    assert files_holding(stack.root, ANA_MARKERS) == {}
    assert stack.store.count("acme", "ana") == 0
    # Kafka re-delivers the old turns and tool results, or a client re-sends them: nothing comes back.
    stack.say("ana", ANA, "s-ana")
    stack.tool("s-ana", "c1", "ana-secret-output: Zorblatt ate the crickets")
    assert files_holding(stack.root, ANA_MARKERS) == {}
    assert read_l0(stack.files, "acme", "ana") == []
    # Ben is untouched; and Ana may come back with something new, said after the erase.
    assert len(read_l0(stack.files, "acme", "ben")) == len(BEN) and stack.store.count("acme", "ben") > 0
    assert (stack.root / "acme/sessions/s-ben/refs/c2.md").read_bytes() == b"ben output: hives are fine"
    stack.say("ana", ["I just moved to Lisbon"], "s-new", at=stack.clock.now() + timedelta(seconds=1))
    assert [m.content for m in read_l0(stack.files, "acme", "ana")] == ["I just moved to Lisbon"]


def test_erasing_a_session_removes_its_files_and_drops_its_old_results(stack: Stack) -> None:
    stack.apply(EraseSession(session="s-ana"), "op-es")
    assert not (stack.root / "acme/sessions/s-ana").exists()
    stack.tool("s-ana", "c1", "ana-secret-output again")
    assert not (stack.root / "acme/sessions/s-ana").exists()
    assert (stack.root / "acme/sessions/s-ben/offload.jsonl").exists()


QUESTIONS = [
    "what pet does she have",
    "which language should I answer in",
    "tea",
    "violin",
    "where does she work",
    "daughter",
    "observatory night",
    "glass",
]


def test_export_then_import_under_another_tenant_and_user_gives_the_same_recall(stack: Stack, tmp_path: Path) -> None:
    bundle = io.BytesIO()
    manifest = export_user(stack.files, "acme", "ana", bundle, embedding_model=EMB.model_id, at=T0, sessions=True)
    assert {f.path.split("/")[0] for f in manifest.files} == {"user", "sessions"}
    other = Stack(tmp_path / "elsewhere", tenant="globex")
    bundle.seek(0)
    result = BundleImporter(other.files, other.store, EMB).import_bundle(bundle, "globex", "ana2")
    assert result["atoms_indexed"] == len(live(stack, "ana"))
    # BM25 statistics span the whole index file: give the new index ben's atoms too, as the old one has them
    ben = io.BytesIO()
    export_user(stack.files, "acme", "ben", ben, embedding_model=EMB.model_id, at=T0)
    ben.seek(0)
    BundleImporter(other.files, other.store, EMB).import_bundle(ben, "globex", "ben2")
    for q in QUESTIONS:
        assert other.top("ana2", q) == stack.top("ana", q), q
    assert (tmp_path / "elsewhere/globex/sessions/s-ana/refs/c1.md").read_bytes().startswith(b"ana-secret-output")
    bundle.seek(0)
    with pytest.raises(Exception, match="already has memory"):
        BundleImporter(other.files, other.store, EMB).import_bundle(bundle, "globex", "ana2")


def test_a_tampered_bundle_is_refused(stack: Stack, tmp_path: Path) -> None:
    bundle = io.BytesIO()
    export_user(stack.files, "acme", "ana", bundle, embedding_model=EMB.model_id, at=T0)
    data = bundle.getvalue().replace(b"Zorblatt", b"Zorblatx", 1)
    other = Stack(tmp_path / "x")
    with pytest.raises(Exception, match="checksum"):
        BundleImporter(other.files, other.store, EMB).import_bundle(io.BytesIO(data), "acme", "ana")
    assert not (tmp_path / "x/acme/users/ana").exists()


def test_reindex_from_records_alone_gives_the_same_recall(stack: Stack) -> None:
    before = {q: stack.top("ana", q) for q in QUESTIONS}
    assert all(before.values())
    stack.store.close()
    for p in stack.root.joinpath("index").iterdir():
        p.unlink()
    stack.store = SqliteVectorStore.open(stack.index, dim=EMB.dim, embedding_model=EMB.model_id)
    stack.clock.advance(3600)  # the rebuild comes later than the writes
    assert reindex_user(stack.files, stack.store, EMB, "acme", "ana") == len(live(stack, "ana"))
    reindex_user(stack.files, stack.store, EMB, "acme", "ben")  # BM25 statistics span the file
    assert {q: stack.top("ana", q) for q in QUESTIONS} == before
    # a row is as old as its record, not as the reindex: recall orders superseded facts by it
    records = {r.id: r for r in live(stack, "ana")}
    rows = stack.store.get("acme", "ana", list(records))
    assert rows and all(row.updated == records[row.id].updated for row in rows)


def test_deleted_and_edited_atoms_leave_scenes_and_persona_at_the_next_pass(stack: Stack) -> None:
    from mnemoflow.memory.curation import Curator
    from mnemoflow.memory.persona.generate import PersonaStore
    from mnemoflow.memory.persona.heuristic import HeuristicPersonaEngine
    from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine
    from mnemoflow.memory.scenes.schedule import L2Timing
    from mnemoflow.memory.scenes.store import SceneStore

    curator = Curator(stack.files, stack.clock, HeuristicSceneEngine(EMB), HeuristicPersonaEngine(), L2Timing())
    asyncio.run(curator.run_now("acme", "ana"))
    user_dir = stack.root / "acme/users/ana"

    def visible() -> bytes:  # scenes and persona, not their backups and undo journal
        return b"".join(p.read_bytes() for p in [*user_dir.glob("scenes/*.md"), user_dir / "persona.md"])

    assert b"Pemberwick" in visible() and b"Flimmerdorf" in visible()
    violin = next(r for r in live(stack, "ana") if "violin" in r.content)
    night = next(r for r in live(stack, "ana") if "observatory" in r.content)
    stack.apply(DeleteAtom(user="ana", atom_id=violin.id), "op-d")
    stack.apply(PatchAtom(user="ana", atom_id=night.id, text="I work day shifts at the Lumenhall observatory"), "op-p")
    stack.clock.advance(60)
    out = asyncio.run(curator.run_now("acme", "ana"))
    assert out.status != "failed", out
    assert b"Pemberwick" not in visible() and b"Flimmerdorf" not in visible()
    assert b"Lumenhall" in visible()
    ids = {i for block in SceneStore(stack.files, "acme", "ana").load().values() for i in block.atom_ids}
    assert violin.id not in ids and night.id not in ids
    assert PersonaStore(stack.files, "acme", "ana").read()


def test_a_curation_pass_after_an_erase_writes_nothing_back(stack: Stack) -> None:
    from mnemoflow.memory.curation import Curator
    from mnemoflow.memory.persona.heuristic import HeuristicPersonaEngine
    from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine
    from mnemoflow.memory.scenes.schedule import L2Timing

    curator = Curator(stack.files, stack.clock, HeuristicSceneEngine(EMB), HeuristicPersonaEngine(), L2Timing())
    asyncio.run(curator.run_now("acme", "ana"))
    stack.apply(EraseUser(user="ana"), "op-erase-2")
    assert asyncio.run(curator.run_now("acme", "ana")).status == "skipped"  # scheduled before the erase
    assert not (stack.root / "acme/users/ana").exists()


def test_an_erase_that_overtakes_a_curation_pass_leaves_nothing_of_the_pass(stack: Stack) -> None:
    """The curator and the eraser are different processes: the erase lands while the pass waits for its model."""
    from mnemoflow.memory.curation import Curator
    from mnemoflow.memory.persona.heuristic import HeuristicPersonaEngine
    from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine
    from mnemoflow.memory.scenes.schedule import L2Timing

    class ErasedMidPlan(HeuristicSceneEngine):
        async def plan(self, *args: Any, **kwargs: Any) -> Any:
            await asyncio.to_thread(stack.apply, EraseUser(user="ana"), "op-erase-mid")  # another thread's loop
            return await super().plan(*args, **kwargs)

    curator = Curator(stack.files, stack.clock, ErasedMidPlan(EMB), HeuristicPersonaEngine(), L2Timing())
    out = asyncio.run(curator.run_now("acme", "ana"))
    assert out.status == "skipped" and out.error is None
    assert stack.status("op-erase-mid").status == "applied"
    assert files_holding(stack.root, ANA_MARKERS) == {}
    assert not (stack.root / "acme/users/ana").exists()
    assert curator.on_l1_done("acme", "ana") is None  # a late notice does not bring a state file back
    curator.on_activity("acme", "ana")
    assert not (stack.root / "acme/users/ana").exists()


def test_a_fence_keeps_what_a_user_said_after_coming_back(stack: Stack) -> None:
    """Only derived files go when an erase overtakes a pass: L0 and records of a returning user stay."""
    from mnemoflow.governance.fence import ErasureFence, UserErased
    from mnemoflow.memory.scenes.paths import ScenePaths

    paths = ScenePaths("acme", "ana")
    fence = ErasureFence(stack.files, "acme", "ana", paths.derived)
    stack.clock.advance(3600)
    stack.apply(EraseUser(user="ana"), "op-erase-back")
    stack.say("ana", ["I just moved to Lisbon"], "s-new", at=stack.clock.now() + timedelta(seconds=1))
    with pytest.raises(UserErased):
        fence.write_atomic(paths.persona, b"Ana keeps an axolotl named Zorblatt")
    assert not (stack.root / paths.persona).exists()
    assert [m.content for m in read_l0(stack.files, "acme", "ana")] == ["I just moved to Lisbon"]
    assert live(stack, "ana")


def test_a_retried_erase_reports_what_all_its_tries_removed(stack: Stack) -> None:
    """A try that fails half-way (the folder removal here) leaves less for the retry; the counts are the erase's."""
    from mnemoflow.errors import StorageError
    from mnemoflow.governance.erase import Eraser

    rows = stack.store.count("acme", "ana")
    failing = {"left": 1}

    class FlakyFiles(LocalFileStore):
        def remove(self, path: str) -> int:
            if path.endswith("users/ana") and failing["left"]:
                failing["left"] -= 1
                raise StorageError("cannot remove: Directory not empty")
            return super().remove(path)

    eraser = Eraser(FlakyFiles(stack.root), stack.store, scrub=lambda: scrub_sqlite_index(stack.index))
    with pytest.raises(StorageError):
        eraser.erase_user("acme", "ana", stack.clock.now(), "op-flaky")
    again = eraser.erase_user("acme", "ana", stack.clock.now(), "op-flaky")
    assert again["index_rows_removed"] == rows > 0 and again["sessions_erased"] == 1
    assert again["files_removed"] > 0
    assert files_holding(stack.root, ANA_MARKERS) == {}
    assert eraser.erase_user("acme", "ana", stack.clock.now(), "op-flaky") == again  # a replay changes nothing


def test_a_fence_opened_while_an_erase_runs_does_not_write_into_it(stack: Stack) -> None:
    """The erase has put its stone but not yet removed the folder when the curator's operation begins: the stone is
    already the fence's baseline, so only its unfinished state tells the write to go."""
    from mnemoflow.governance.fence import ErasureFence, UserErased
    from mnemoflow.governance.tombstones import Tombstone, Tombstones
    from mnemoflow.memory.scenes.paths import ScenePaths

    paths = ScenePaths("acme", "ana")
    stones = Tombstones(stack.files)
    stones.put("acme", "users", "ana", Tombstone(erased_at=stack.clock.now(), operation_id="op-running", done=False))
    fence = ErasureFence(stack.files, "acme", "ana", paths.derived)
    with pytest.raises(UserErased):
        fence.write_atomic(paths.persona, b"Ana keeps an axolotl named Zorblatt")
    assert not (stack.root / paths.persona).exists()
    assert read_l0(stack.files, "acme", "ana")  # the erase itself removes the rest; the fence only its own files
    stones.add_removed("acme", "users", "ana", "op-running", {"files_removed": 0}, done=True)
    assert stones.get("acme", "users", "ana").done  # type: ignore[union-attr]


def test_a_bundle_keeps_each_atoms_scope_and_each_messages_agent(stack: Stack, tmp_path: Path) -> None:
    """docs/concepts/scopes.md: scopes ride in the record lines and the L0 lines, so an import indexes them again."""
    coder = [
        TurnEvent(
            tenant="acme",
            message_id=f"c{i}",
            user="ana",
            session="s-code",
            role="user",
            content=text,
            ts=T0 + timedelta(hours=1, minutes=i),
            agent="coder",
            team="eng",
        )
        for i, text in enumerate(["From now on always answer me in short bullet points.", "I live in Lisbon now."])
    ]
    asyncio.run(stack.turns.handle([stack.raw(e) for e in coder]))  # through the worker, as say() does
    asyncio.run(stack.pipeline.run("acme", "ana"))
    scopes = {r.content: r.scope for r in live(stack, "ana")}
    assert scopes["From now on always answer me in short bullet points."] == "agent:coder"
    stack.files.write_atomic("acme/users/ana/agents/coder/persona.md", b"- short bullet points")  # as L3 writes it
    bundle = io.BytesIO()
    export_user(stack.files, "acme", "ana", bundle, embedding_model=EMB.model_id, at=T0)
    other = Stack(tmp_path / "elsewhere", tenant="globex")
    bundle.seek(0)
    BundleImporter(other.files, other.store, EMB).import_bundle(bundle, "globex", "ana2")
    assert {r.content: r.scope for r in live(other, "ana2")} == scopes
    rows = other.store.get("globex", "ana2", [r.id for r in live(other, "ana2")])
    assert {r.text: r.scope for r in rows} == scopes
    assert {m.agent for m in read_l0(other.files, "globex", "ana2", limit=1000) if m.id.startswith("c")} == {"coder"}
    assert other.files.read_bytes("globex/users/ana2/agents/coder/persona.md") == b"- short bullet points"


def test_a_bundle_of_the_version_before_scopes_still_imports_and_an_unknown_version_is_refused(
    stack: Stack, tmp_path: Path
) -> None:
    """Version 2 is what a release from before scopes refuses (it would read private atoms as shared); version 1
    bundles, all shared, import as before."""
    import json
    import tarfile

    def with_version(version: int) -> io.BytesIO:
        bundle = io.BytesIO()
        export_user(stack.files, "acme", "ben", bundle, embedding_model=EMB.model_id, at=T0)
        out = io.BytesIO()
        with tarfile.open(fileobj=io.BytesIO(bundle.getvalue())) as src, tarfile.open(fileobj=out, mode="w") as dst:
            for member in src.getmembers():
                data = src.extractfile(member).read()  # type: ignore[union-attr]
                if member.name == "manifest.json":
                    data = json.dumps({**json.loads(data), "version": version}).encode()
                    member.size = len(data)
                dst.addfile(member, io.BytesIO(data))
        out.seek(0)
        return out

    other = Stack(tmp_path / "elsewhere", tenant="globex")
    imported = BundleImporter(other.files, other.store, EMB).import_bundle(with_version(1), "globex", "ben1")
    assert imported["atoms_indexed"] == len(live(stack, "ben"))
    with pytest.raises(InvalidInput, match="this stack reads mnemoflow-user-bundle v1 and v2"):
        BundleImporter(other.files, other.store, EMB).import_bundle(with_version(3), "globex", "ben3")
