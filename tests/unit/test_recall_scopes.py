"""Recall's system context per viewer: the persona and scene navigation of every scope it sees, and of no other
(docs/concepts/scopes.md)."""

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.curation import Curator
from mnemoflow.memory.l1.models import L1Record
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.persona.generate import PersonaStore
from mnemoflow.memory.persona.heuristic import HeuristicPersonaEngine
from mnemoflow.memory.recall.recaller import Recaller, scoped_context
from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine
from mnemoflow.memory.scenes.schedule import L2Timing
from mnemoflow.scopes import Viewer
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
EMB = HashingEmbedder(64)
SAID = [  # id, text, type, scope
    ("a1", "Lives in Lyon and likes green tea", "persona", "shared"),
    ("a2", "From now on always answer me in short bullet points.", "instruction", "agent:coder"),
    ("a3", "用中文回答我的问题，代码注释用英文。", "instruction", "agent:coder"),
    ("a4", "Escalate refunds above 200 euros to the finance desk", "instruction", "team:help"),
]


def curated(tmp_path: Path) -> tuple[LocalFileStore, Recaller]:
    files = LocalFileStore(tmp_path)
    records = [
        L1Record(
            id=i,
            content=text,
            type=kind,
            priority=60,
            source_message_ids=[f"m{i}"],
            timestamps=[T0],
            created=T0,
            updated=T0,
            scope=scope,
        )  # fmt: skip
        for i, text, kind, scope in SAID
    ]
    RecordLog(files, "acme", "ana").append(records, [], T0)
    curator = Curator(files, ManualClock(T0), HeuristicSceneEngine(EMB), HeuristicPersonaEngine(), L2Timing())
    assert asyncio.run(curator.run_now("acme", "ana")).status == "applied"
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    return files, Recaller(store=store, embedder=EMB, files=files)


def test_each_viewer_gets_the_persona_and_scenes_of_the_scopes_it_sees(tmp_path: Path) -> None:
    files, recaller = curated(tmp_path)
    default = recaller.recall_sync("acme", "ana", "what should I know?").system_context
    coder = recaller.recall_sync("acme", "ana", "what?", viewer=Viewer(agent="coder", team="eng")).system_context
    support = recaller.recall_sync("acme", "ana", "what?", viewer=Viewer(agent="support", team="help")).system_context
    assert "Lyon" in default and "bullet" not in default and "refunds" not in default and "agents/" not in default
    assert "Lyon" in coder and "bullet points" in coder and "中文" in coder and "refunds" not in coder
    assert "### Known to agent coder only" in coder and "acme/users/ana/agents/coder/scenes/" in coder
    assert "Lyon" in support and "refunds" in support and "bullet" not in support and "中文" not in support
    assert "### Shared within team help" in support
    assert coder.index("Lyon") < coder.index("bullet points")  # shared first
    private = PersonaStore(files, "acme", "ana", "agent:coder").read_body()
    assert private.count("short bullet points") == 1 and private.count("用中文回答") == 1  # once: no "Plan" again


def test_private_parts_share_the_budget() -> None:
    texts = {"shared": "s" * 3000, "team:eng": "t" * 3000, "agent:coder": "a" * 3000}
    out = scoped_context(("shared", "team:eng", "agent:coder"), texts.__getitem__, 2000)
    assert len(out) <= 2000 and out.count("### ") == 2 and out.startswith("s")
    assert scoped_context(("shared",), texts.__getitem__, 2000) == scoped_context(
        ("shared", "agent:x"), {**texts, "agent:x": ""}.__getitem__, 2000
    )  # a viewer with no private memory gets the shared text as before
    chinese = {"shared": "我住在杭州", "agent:coder": "以后回答我请用简短的要点"}
    assert "### 仅 coder 可见\n以后回答" in scoped_context(("shared", "agent:coder"), chinese.__getitem__, 2000)
