"""Extraction through the ``extractor`` deployment with Serve batching on (16) and off (1), 16 concurrent users.

Used by ``bench/serving.py``. Each request is one user's L1 pass over 10 new turns (LoCoMo text, read through the
eval set's loader). Two engines, each measured batched and unbatched:

* ``heuristic``: the default engine (no model) with the MiniLM embedder and the SQLite index — CPU-bound work;
* ``model_server``: the ``openai`` engine behind the ``llm`` deployment, against a local OpenAI-compatible stub
  that answers every call after a fixed 150 ms with an empty (schema-valid) extraction. It stands in for a
  continuous-batching model server (vLLM on a GPU), whose latency per call barely grows with concurrency; it
  measures the deployment's batching, not a model.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"
LATENCY_S = 0.15
CONCURRENCY = 16


def _texts(n: int) -> list[str]:
    sys.path.insert(0, str(EVAL))
    from loaders import load_locomo

    turns = [t["text"] for c in load_locomo(str(EVAL / "locomo" / "locomo-dev.json")) for t in c["turns"]]
    return turns[:n]


def _seed(data_dir: Path, users: int) -> None:
    from mnemoflow.events import TurnEvent
    from mnemoflow.memory.l0 import L0Writer
    from mnemoflow.storage import LocalFileStore

    texts = _texts(users * 10)
    t0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    events = [
        TurnEvent(
            tenant="bench",
            message_id=f"u{i // 10}-m{i % 10}",
            user=f"u{i // 10}",
            session="s",
            role="user" if i % 2 == 0 else "assistant",
            content=text,
            ts=t0 + timedelta(seconds=i),
        )
        for i, text in enumerate(texts)
    ]
    L0Writer(LocalFileStore(data_dir)).write(events)


def _stub_app() -> Any:
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(body: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(LATENCY_S)
        return {
            "choices": [{"message": {"role": "assistant", "content": '{"scenes": []}'}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 500, "completion_tokens": 5},
        }

    return app


HOW = {
    "end_to_end": "client",
    "serve_hop": "derived: end_to_end - replica",
    "replica": "extractor's reply",
    "queued": "derived: replica - pass",
    "pass": "extractor's reply",
}
"""The stages of one extraction request, in the stage table's order, with where each figure comes from:
end_to_end, the handle's call as a stream worker waits for it; serve_hop, Serve's call and its batch wait; replica,
the extractor replica from the request's batch starting to its reply; queued, the wait there for the user's lock
and the pass loop; pass, the L1 pass itself."""


def stage_times() -> Any:
    from bench.stages import StageTimes

    return StageTimes(dict(HOW))


async def _drive(handle: Any, users: int, stages: Any = None, kind: str = "") -> dict[str, float]:
    """``stages`` (a :class:`bench.stages.StageTimes`): each request's stages, as ``kind``."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for k in range(users):
        queue.put_nowait(f"u{k}")
    latencies: list[float] = []

    async def client() -> None:
        while not queue.empty():
            user = queue.get_nowait()
            start = time.perf_counter()
            result = await handle.run.remote(("bench", user))
            assert result.ok, result
            latencies.append(time.perf_counter() - start)
            if stages is not None:
                end_to_end = latencies[-1] * 1000
                stages.request(kind)
                stages.add_all(
                    kind,
                    {
                        "end_to_end": end_to_end,
                        "serve_hop": end_to_end - result.replica_ms,
                        "replica": result.replica_ms,
                        "queued": result.replica_ms - result.pass_ms,
                        "pass": result.pass_ms,
                    },
                )

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "rps": round(users / elapsed, 2),
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 1),
    }


def _measure(engine: str, batch: int, users: int, url: str | None, stages: Any = None) -> dict[str, float]:
    from ray import serve

    from mnemoflow.config import Settings
    from serving.extractor import build_extractor_app

    with tempfile.TemporaryDirectory(prefix="mnemoflow-bench-extract-") as tmp:
        data_dir = Path(tmp)
        _seed(data_dir, users)
        settings = Settings(data_dir=data_dir)
        if engine == "model_server":
            from serving.llm import build_llm_app

            settings = Settings(data_dir=data_dir, llm_engine="openai", llm_url=url, llm_model="stub")
            serve.run(build_llm_app(settings), name="llm", route_prefix=None)
        handle = serve.run(build_extractor_app(settings, max_batch_size=batch), name="extractor", route_prefix=None)
        try:
            return asyncio.run(_drive(handle, users, stages, f"{engine}, {'batched' if batch > 1 else 'unbatched'}"))
        finally:
            serve.delete("extractor")
            if engine == "model_server":
                serve.delete("llm")


def extraction_benchmark(quick: bool, users: int | None = None, stages: Any = None) -> dict[str, Any]:
    """Needs a running Ray (the caller starts it). ``users``: requests per engine and mode (default 48 quick, 160).
    ``stages`` (from :func:`stage_times`): each request's stages, by ``<engine>, <mode>``."""
    from tests.services import asgi_server

    users = users or (48 if quick else 160)
    out: dict[str, Any] = {"users": users, "concurrency": CONCURRENCY, "stub_latency_ms": LATENCY_S * 1000}
    modes = (("batched", 16), ("unbatched", 1))
    out["heuristic"] = {mode: _measure("heuristic", b, users, None, stages) for mode, b in modes}
    with asgi_server(_stub_app()) as url:
        out["model_server"] = {mode: _measure("model_server", b, users, url, stages) for mode, b in modes}
    out["batched"], out["unbatched"] = out["model_server"]["batched"], out["model_server"]["unbatched"]
    for engine in ("heuristic", "model_server"):
        out[engine]["speedup"] = round(out[engine]["batched"]["rps"] / out[engine]["unbatched"]["rps"], 2)
    return out


if __name__ == "__main__":
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_worker_niceness", "0")
    sys.path.insert(0, str(ROOT))

    from mnemoflow.cli.stack import start_local_ray

    start_local_ray("mnemoflow")
    print(json.dumps(extraction_benchmark("--quick" in sys.argv), indent=2))
