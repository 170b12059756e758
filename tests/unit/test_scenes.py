"""L2 scenes: file format, plan contract (create/update/merge/delete), limits, confinement, all-or-nothing."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.errors import InvalidInput, StorageError
from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine
from mnemoflow.memory.scenes.model import SceneBlock, SceneInput, normalize_filename, parse_scene, render_scene
from mnemoflow.memory.scenes.passes import run_scene_pass, run_scene_passes, windows
from mnemoflow.memory.scenes.plan import SceneEdit, ScenePlan, ScenePlanRejected, ScenePolicy, apply_plan
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock

T0 = datetime(2025, 3, 1, tzinfo=UTC)
NOW = datetime(2025, 3, 2, tzinfo=UTC)


def atom(i: int, text: str, kind: str = "episodic") -> SceneInput:
    return SceneInput(id=f"a{i}", type=kind, priority=50, content=text, created_at=T0 + timedelta(minutes=i))


def block(name: str, heat: int = 1, ids: tuple[str, ...] = ()) -> SceneBlock:
    return SceneBlock(name, f"about {name}", f"## core narrative\n{name} text", heat, T0, T0, ids)


class PlanEngine:
    """A scene engine that returns fixed plans in order (the contract tests drive apply rules through it)."""

    name = "scripted"

    def __init__(self, *plans: ScenePlan, retries: int = 0) -> None:
        self.plans = list(plans)
        self.rejection_retries = retries
        self.feedback: list[str | None] = []

    async def plan(self, scenes, atoms, now, policy, feedback=None) -> ScenePlan:  # type: ignore[no-untyped-def]
        self.feedback.append(feedback)
        return self.plans.pop(0)

    def fallback_for(self, error: Exception) -> None:
        return None


def run(store: SceneStore, engine, atoms, policy=None):  # type: ignore[no-untyped-def]
    policy = policy or ScenePolicy()
    return asyncio.run(run_scene_pass(store, engine, atoms, now=NOW, policy=policy))


@pytest.fixture
def store(tmp_path: Path) -> SceneStore:
    return SceneStore(LocalFileStore(tmp_path), "acme", "alice")


def seed(store: SceneStore, *blocks: SceneBlock) -> None:
    store.commit({b.filename: b for b in blocks}, "seed")


# --- format -------------------------------------------------------------------------------------------------


def test_render_parse_round_trip_and_lenient_parse() -> None:
    b = SceneBlock("x.md", "sum", "## core narrative\nbody", 4, T0, NOW, ("a1", "a2"))
    assert parse_scene("x.md", render_scene(b)) == b
    plain = parse_scene("y.md", "just text")
    assert plain.body == "just text" and plain.heat == 0 and not plain.deleted
    assert parse_scene("z.md", "-----META-START-----\nheat: x\n-----META-END-----\n[DELETED]").deleted


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("My Trip (2024)!", "my-trip-2024.md"),
        ("../../etc/passwd", "etcpasswd.md"),
        ("  ", "scene.md"),
        ("a\u00a0b\u3000c.MD", "a-b-c.md"),
        ("旅行 计划", "旅行-计划.md"),
        ("x--__..y", "x-_.y.md"),
        ("new_scene1.txt", "new_scene1.md"),
        ("notes.txt.md", "notes.md"),
        ("node.js tips", "node.js-tips.md"),
    ],
)
def test_normalize_filename(raw: str, expected: str) -> None:
    assert normalize_filename(raw) == expected


def test_normalize_filename_collisions() -> None:
    assert normalize_filename("trip", {"trip.md", "trip-2.md"}) == "trip-3.md"


# --- plan contract ------------------------------------------------------------------------------------------


def test_create_update_merge_delete(store: SceneStore) -> None:
    seed(store, block("a.md", 2, ("x1",)), block("b.md", 3, ("x2",)), block("c.md", 1), block("d.md", 1))
    plan = ScenePlan(
        edits=[
            SceneEdit(action="update", filename="a.md", summary="A", body="new a", atom_ids=["a1"]),
            SceneEdit(action="merge", filename="b.md", sources=["b.md", "c.md"], summary="BC", body="bc", atom_ids=[]),
            SceneEdit(action="delete", filename="d.md"),
            SceneEdit(action="create", filename="New Topic", summary="N", body="n", atom_ids=["a2"]),
        ],
        persona_update_reason="big news",
    )
    out = run(store, PlanEngine(plan), [atom(1, "one"), atom(2, "two")])
    live = store.load()
    assert sorted(live) == ["a.md", "b.md", "new-topic.md"]
    assert live["a.md"].heat == 3 and live["a.md"].atom_ids == ("x1", "a1") and live["a.md"].created == T0
    assert live["b.md"].heat == 3 + 1 + 1 and live["b.md"].atom_ids == ("x2",)
    assert live["new-topic.md"].heat == 1 and live["new-topic.md"].updated == NOW
    assert store.read("c.md").deleted and store.read("d.md").deleted  # type: ignore[union-attr]
    assert out.created == ("new-topic.md",) and set(out.deleted) == {"c.md", "d.md"}
    assert out.persona_update_reason == "big news" and out.cursor == T0 + timedelta(minutes=2)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (SceneEdit(action="update", filename="missing.md", body="x"), "does not exist"),
        (SceneEdit(action="merge", filename="a.md", sources=["a.md"], body="x"), "2-4 existing"),
        (SceneEdit(action="create", filename="n", body="x", atom_ids=["not-in-window"]), "unknown atom ids"),
        (SceneEdit(action="update", filename="a.md", body="[DELETED]"), "non-empty body"),
    ],
)
def test_invalid_edits_are_refused_and_nothing_is_written(store: SceneStore, edit: SceneEdit, problem: str) -> None:
    seed(store, block("a.md"))
    before = store.files.read_bytes(store.paths.scene("a.md"))
    with pytest.raises(ScenePlanRejected, match=problem):
        run(store, PlanEngine(ScenePlan(edits=[edit])), [atom(1, "one")])
    assert store.files.read_bytes(store.paths.scene("a.md")) == before
    assert store.names() == ["a.md"]


def test_one_create_per_pass_and_one_edit_per_file(store: SceneStore) -> None:
    seed(store, block("a.md"))
    two = [SceneEdit(action="create", filename=n, body="x") for n in ("p", "q")]
    with pytest.raises(ScenePlanRejected, match="at most 1"):
        run(store, PlanEngine(ScenePlan(edits=two)), [atom(1, "x")])
    twice = [SceneEdit(action="update", filename="a.md", body="x"), SceneEdit(action="delete", filename="a.md")]
    with pytest.raises(ScenePlanRejected, match="more than one edit"):
        run(store, PlanEngine(ScenePlan(edits=twice)), [atom(1, "x")])


def test_at_most_15_live_scenes(store: SceneStore) -> None:
    seed(store, *(block(f"s{i}.md") for i in range(15)))
    create = ScenePlan(edits=[SceneEdit(action="create", filename="sixteen", body="x")])
    with pytest.raises(ScenePlanRejected, match="at most 15"):
        run(store, PlanEngine(create), [atom(1, "x")])
    merge_then_create = ScenePlan(
        edits=[
            SceneEdit(action="merge", filename="s0.md", sources=["s0.md", "s1.md"], body="merged"),
            SceneEdit(action="create", filename="sixteen", body="x"),
        ]
    )
    run(store, PlanEngine(merge_then_create), [atom(1, "x")])
    assert len(store.load()) == 15


def test_refused_plan_is_asked_again_with_the_reasons(store: SceneStore) -> None:
    bad = ScenePlan(edits=[SceneEdit(action="update", filename="nope.md", body="x")])
    good = ScenePlan(edits=[SceneEdit(action="create", filename="ok", body="x", atom_ids=["a1"])])
    engine = PlanEngine(bad, good, retries=1)
    run(store, engine, [atom(1, "x")])
    assert engine.feedback[0] is None and "nope.md" in (engine.feedback[1] or "")
    assert list(store.load()) == ["ok.md"]


# --- confinement --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "../persona.md",
        "../../bob/scenes/x.md",
        "/etc/passwd.md",
        "a/b.md",
        ".hidden.md",
        "scenes_x/../../y.md",
        "x.txt",
    ],
)
def test_path_escapes_are_refused(store: SceneStore, name: str) -> None:
    with pytest.raises(InvalidInput):
        store.paths.scene(name, store.files)
    with pytest.raises(InvalidInput):
        store.commit({name: block(name)}, "evil")


def test_escape_through_model_names_is_neutralised(store: SceneStore) -> None:
    plan = ScenePlan(edits=[SceneEdit(action="create", filename="../../../outside", body="x")])
    run(store, PlanEngine(plan), [atom(1, "x")])
    assert store.names() == ["outside.md"]
    assert not (Path(store.files.root) / "acme" / "users" / "outside.md").exists()  # type: ignore[attr-defined]


def test_symlink_out_of_the_folder_is_never_followed(store: SceneStore, tmp_path: Path) -> None:
    seed(store, block("a.md"))
    secret = tmp_path / "secret.md"
    secret.write_text("secret")
    os.symlink(secret, tmp_path / store.paths.scenes_dir / "link.md")
    assert store.names() == ["a.md"]
    with pytest.raises(InvalidInput):
        store.read("link.md")


# --- all-or-nothing -----------------------------------------------------------------------------------------


class FailingFiles(LocalFileStore):
    """Fails the n-th write of a scene file (journal writes pass), like a full disk mid-pass."""

    def __init__(self, root: Path, fail_at: int) -> None:
        super().__init__(root)
        self.fail_at, self.scene_writes = fail_at, 0

    def write_atomic(self, path: str, data: bytes) -> None:
        if "/scenes/" in path and "/.backup/" not in path:
            self.scene_writes += 1
            if self.scene_writes == self.fail_at:
                raise StorageError("disk full")
        super().write_atomic(path, data)


def test_failure_mid_pass_restores_the_backup(tmp_path: Path) -> None:
    files = FailingFiles(tmp_path, fail_at=10**9)
    store = SceneStore(files, "acme", "alice")
    seed(store, block("a.md"), block("b.md"))
    snapshot = {n: files.read_bytes(store.paths.scene(n)) for n in store.names()}
    files.fail_at, files.scene_writes = 3, 0
    plan = ScenePlan(
        edits=[
            SceneEdit(action="update", filename="a.md", body="changed a"),
            SceneEdit(action="update", filename="b.md", body="changed b"),
            SceneEdit(action="create", filename="c", body="new c"),
        ]
    )
    with pytest.raises(StorageError):
        run(store, PlanEngine(plan), [atom(1, "x")])
    assert {n: files.read_bytes(store.paths.scene(n)) for n in ("a.md", "b.md")} == snapshot
    assert sorted(store.load()) == ["a.md", "b.md"]


def test_crash_mid_pass_is_rolled_back_by_the_next_pass(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    store = SceneStore(files, "acme", "alice")
    seed(store, block("a.md"))
    original = files.read_bytes(store.paths.scene("a.md"))
    # Simulate a process that died after writing the open journal and one file.
    import json

    files.write_atomic(
        store.paths.journal,
        json.dumps(
            {"pass": "p", "seq": 5, "committed": False, "files": {"a.md": original.decode(), "n.md": None}}
        ).encode(),
    )  # type: ignore[union-attr]
    files.write_atomic(store.paths.scene("a.md"), b"half-written")
    files.write_atomic(store.paths.scene("n.md"), render_scene(block("n.md")).encode())
    assert store.recover() is True
    assert files.read_bytes(store.paths.scene("a.md")) == original
    assert sorted(store.load()) == ["a.md"]
    assert store.recover() is False


# --- windows and the heuristic engine -----------------------------------------------------------------------


def test_windows_never_split_equal_timestamps() -> None:
    same = [SceneInput(id=f"s{i}", type="episodic", content="x", created_at=T0) for i in range(5)]
    later = [atom(100 + i, "y") for i in range(3)]
    ws = windows(same + later, batch_size=2)
    assert [len(w) for w in ws] == [5, 2, 1]


TOPICS = [
    "hiking mountains trail boots",
    "hiking mountains summit weekend",
    "hiking trail mountains dog",
    "rust compiler borrow checker",
    "rust compiler crate release",
    "rust compiler async runtime",
    "piano lessons chopin practice",
    "piano chopin nocturne practice",
]


def _heuristic_run(tmp_path: Path, sub: str) -> dict[str, bytes | None]:
    store = SceneStore(LocalFileStore(tmp_path / sub), "acme", "alice")
    engine = HeuristicSceneEngine(HashingEmbedder(dim=256))
    atoms = [atom(i, t) for i, t in enumerate(TOPICS)]
    report = asyncio.run(
        run_scene_passes(
            store, engine, atoms, now=ManualClock(NOW).now, policy=ScenePolicy(max_creates=3), batch_size=4
        )
    )
    assert report.error is None and report.cursor == atoms[-1].ts
    return {n: store.files.read_bytes(store.paths.scene(n)) for n in store.names()}


def test_heuristic_engine_is_deterministic_and_groups_topics(tmp_path: Path) -> None:
    first, second = _heuristic_run(tmp_path, "one"), _heuristic_run(tmp_path, "two")
    assert first == second
    scenes = {n: parse_scene(n, (d or b"").decode()) for n, d in first.items()}
    live = [b for b in scenes.values() if not b.deleted]
    assert 2 <= len(live) <= 4
    owner = {a: b.filename for b in live for a in b.atom_ids}
    assert owner["a0"] == owner["a1"] == owner["a2"]
    assert owner["a3"] == owner["a4"] == owner["a5"]
    assert sorted(owner) == [f"a{i}" for i in range(8)]  # nothing dropped


def test_heuristic_engine_merges_when_full(tmp_path: Path) -> None:
    store = SceneStore(LocalFileStore(tmp_path), "acme", "alice")
    policy = ScenePolicy(max_scenes=3, max_creates=1)
    engine = HeuristicSceneEngine(HashingEmbedder(dim=256))
    words = ["alpha beta gamma", "delta epsilon zeta", "eta theta iota", "kappa lambda mu"]
    for i, w in enumerate(words):
        batch = [atom(10 * i + j, f"{w} {j}") for j in range(3)]
        asyncio.run(run_scene_pass(store, engine, batch, now=NOW + timedelta(hours=i), policy=policy))
        assert len(store.load()) <= 3
    assert sum(b.heat for b in store.load().values()) >= 4
    assert sorted(a for b in store.load().values() for a in b.atom_ids) == sorted(
        f"a{10 * i + j}" for i in range(4) for j in range(3)
    )


def test_apply_plan_is_pure() -> None:
    current = {"a.md": block("a.md", 2)}
    plan = ScenePlan(edits=[SceneEdit(action="update", filename="a.md", body="b")])
    result = apply_plan(current, plan, set(), NOW)
    assert current["a.md"].heat == 2 and result.writes["a.md"].heat == 3
