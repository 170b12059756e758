"""A tenant's memory written through the core, for the dashboard's tests: real L0, atoms, scenes, persona,
offload entries and canvases, with user data that tries to inject script."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from mnemoflow.config import Settings
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.errors import ServiceUnavailable
from mnemoflow.events import TurnEvent
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.curation import Curator
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.memory.persona.heuristic import HeuristicPersonaEngine
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine
from mnemoflow.offload.entries import OffloadWriter
from mnemoflow.offload.session import compact_session
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ListBus, ManualClock
from serving.api import create_api

KEY, OTHER_KEY = "key-acme-dashboard", "key-other-dashboard"
USER, SESSION = "ana", "run-1"
XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
SAID = [
    "I am a chemist and I drink oat milk every morning.",
    "I live in Porto with my cat Miso.",
    f"My favourite tag is {XSS} and I moved to Lisbon last year.",
    "Please always answer in French.",
    "I go hiking in the mountains every weekend.",
]
TASKS = [
    "Fix the failing parser test in the repository: the tokenizer drops quotes " * 3,
    "Implement a new caching layer for the HTTP client with an eviction policy " * 3,
]
RAW = "\n".join([f"line {i}: value = {i * 7}" for i in range(200)] + [f"echo {XSS}", "FAILED 3 tests"])
T0 = datetime(2026, 4, 2, 15, 30, tzinfo=UTC)


@dataclass
class Dashboard:
    app: FastAPI
    settings: Settings
    canvases: int


def _task(task: str, calls: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for i in range(calls):
        cid = f"{task[:3]}_{i}"
        call = {
            "id": cid,
            "type": "function",
            "function": {"name": ["view", "edit", "bash"][i % 3], "arguments": '{"path": "a.py"}'},
        }
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": cid, "content": f"{cid}\n{RAW}"},
        ]
    return messages


def build(root: Path) -> Dashboard:
    """Tenant ``acme``: user ``ana`` (L0, atoms, scenes, persona) and session ``run-1`` (two long tasks, so two
    canvases); tenant ``other``: user ``bob``. The app has no broker (nothing here writes)."""
    files, clock, emb = LocalFileStore(root, fsync=False), ManualClock(T0), HashingEmbedder(64)
    turns = [
        TurnEvent(tenant="acme", message_id=f"m{i}", user=USER, session=SESSION, role="user", content=text, ts=T0)
        for i, text in enumerate(SAID)
    ]
    turns[3] = turns[3].model_copy(update={"agent": "coder", "team": "eng"})  # its instruction is the coder's own
    turns.append(
        TurnEvent(
            tenant="other",
            message_id="b0",
            user="bob",
            session="b",
            role="user",
            content="I am Bob and I keep bees.",
            ts=T0,
        )
    )
    L0Writer(files).write(turns)
    store = InMemoryVectorStore(dim=64, embedding_model=emb.model_id)
    pipeline = L1Pipeline(
        files=files, store=store, embedder=emb, extractor=HeuristicExtractor(), judge=HeuristicJudge(), clock=clock
    )
    asyncio.run(pipeline.run("acme", USER))
    asyncio.run(pipeline.run("other", "bob"))
    curator = Curator(files, clock, HeuristicSceneEngine(emb, min_new=1), HeuristicPersonaEngine())
    asyncio.run(curator.run_now("acme", USER))
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for task in TASKS:
        history += _task(task, 6)
        asyncio.run(compact_session(files, "acme", SESSION, history, 200_000, clock=clock, writer=OffloadWriter(files)))
    settings = Settings(data_dir=root, api_keys={"acme": KEY, "other": OTHER_KEY})

    async def index() -> str:
        return f"{store.count('acme')} rows of tenant acme"

    async def broker() -> str:
        raise ServiceUnavailable("no broker in this test")

    app = create_api(
        settings,
        ListBus(),
        recaller_factory=lambda: Recaller(store=store, embedder=emb, files=files),
        health_checks=lambda deps: {"atom_index": index, "broker": broker},
    )
    return Dashboard(app, settings, canvases=len(TASKS))
