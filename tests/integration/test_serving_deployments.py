"""The model-side Serve deployments on real Ray Serve: batched embeddings and the llm deployment."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from mnemoflow.config import Settings
from mnemoflow.embedding.hashing import HashingEmbedder
from mnemoflow.errors import StructuredOutputError
from mnemoflow.ports.llm import ChatMessage
from mnemoflow.testing import FakeOpenAIServer, FakeReply
from tests.prometheus import ray_metrics_url, scrape, total
from tests.services import asgi_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def serve_instance() -> Iterator[None]:
    import ray
    from ray import serve

    from mnemoflow.cli.stack import start_local_ray

    start_local_ray("mnemoflow-test")
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    yield
    serve.shutdown()
    ray.shutdown()


def test_embedder_batches_concurrent_callers_and_matches_in_process(serve_instance: None) -> None:
    from ray import serve

    from serving.embedder import ServeEmbedder, build_embedder_app

    handle = serve.run(build_embedder_app(Settings(embedder="hashing")), name="embedder", route_prefix=None)
    remote = ServeEmbedder(handle)
    texts = [f"fact number {i} about the deploy" for i in range(64)]
    with ThreadPoolExecutor(32) as pool:
        vectors = list(pool.map(lambda t: remote.embed([t])[0], texts))
    local = HashingEmbedder(dim=remote.dim).embed(texts)
    assert all(max(abs(a - b) for a, b in zip(v, w, strict=True)) < 1e-6 for v, w in zip(vectors, local, strict=True))
    sizes = handle.batch_sizes.remote().result()
    assert sum(sizes) >= 64 and max(sizes) > 1, sizes  # concurrent single-text calls ran as shared batches
    assert remote.embed(texts[:5]) == [remote.embed([t])[0] for t in texts[:5]]


class Fact(BaseModel):
    content: str
    tags: list[str] = Field(max_length=3)


def _ship_this_module_by_value() -> None:
    """Replicas cannot import a test module; output models in mnemoflow.prompts are importable everywhere."""
    import sys

    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_llm_deployment_returns_validated_objects_and_retries_in_the_replica(serve_instance: None) -> None:
    from ray import serve

    from serving.llm import ServeLLM, build_llm_app

    _ship_this_module_by_value()
    fake = FakeOpenAIServer(
        [
            FakeReply('{"content": "likes tea", "tags": ["a", "b", "c", "d"]}', 11, 7),
            FakeReply('{"content": "likes tea", "tags": ["drink"]}', 13, 5),
            FakeReply("not json", 17, 2),
            FakeReply("still not json", 19, 3),
        ]
    )
    with asgi_server(fake) as url:
        settings = Settings(llm_engine="openai", llm_url=url, llm_model="m")
        llm = ServeLLM(serve.run(build_llm_app(settings), name="llm", route_prefix=None))
        messages = [ChatMessage(role="user", content="extract")]
        fact = asyncio.run(llm.complete(messages, Fact, max_tokens=64, stage="l1"))
        assert fact == Fact(content="likes tea", tags=["drink"])
        assert len(fake.requests) == 2 and fake.requests[0]["max_tokens"] == 64
        assert fake.requests[0]["response_format"]["json_schema"]["schema"]["properties"]["tags"]["maxItems"] == 3
        with pytest.raises(StructuredOutputError):
            asyncio.run(llm.complete(messages, Fact, max_tokens=64, stage="l1"))
    totals = llm.usage.stages()["l1"]
    assert (totals.calls, totals.ok, totals.failed) == (2, 1, 1)

    # The replica's engine counted the same calls into Ray's metrics, tokens of every attempt included.
    url, tags = ray_metrics_url(), {"stage": "l1", "engine": "openai"}
    series = [
        ("ray_mnemoflow_llm_calls_total", {"result": "ok"}),
        ("ray_mnemoflow_llm_calls_total", {"result": "failed"}),
        ("ray_mnemoflow_llm_tokens_total", {"kind": "prompt"}),
        ("ray_mnemoflow_llm_tokens_total", {"kind": "completion"}),
        ("ray_mnemoflow_llm_latency_seconds_count", {}),
    ]
    want = [1, 1, 11 + 13 + 17 + 19, 7 + 5 + 2 + 3, 2]
    deadline = time.monotonic() + 60
    while True:  # Ray's agent exports every few seconds
        samples = scrape(url)
        got = [total(samples, name, **tags, **labels) for name, labels in series]
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert got == want, list(zip(series, got, strict=True))


def test_extractor_batches_concurrent_users_and_stores_their_atoms(serve_instance: None, tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from ray import serve

    from mnemoflow.events import TurnEvent
    from mnemoflow.memory.l0 import L0Writer
    from mnemoflow.memory.l1.pipeline import L1RunReply
    from mnemoflow.memory.l1.records import RecordLog
    from mnemoflow.storage import LocalFileStore
    from serving.extractor import build_extractor_app

    files, t0 = LocalFileStore(tmp_path), datetime(2026, 2, 1, tzinfo=UTC)
    said = ["I am a nurse and I work night shifts", "I always drink green tea", "Please answer in French"]
    L0Writer(files).write(
        [
            TurnEvent(
                tenant="t",
                message_id=f"u{k}-m{i}",
                user=f"u{k}",
                session="s",
                role="user",
                content=text,
                ts=t0 + timedelta(seconds=i),
            )
            for k in range(16)
            for i, text in enumerate(said)
        ]
    )
    settings = Settings(data_dir=tmp_path, embedder="hashing")
    handle = serve.run(build_extractor_app(settings, max_batch_size=16), name="extractor", route_prefix=None)

    async def run_all() -> list[L1RunReply]:
        return list(await asyncio.gather(*(handle.run.remote(("t", f"u{k}")) for k in range(16))))

    results = asyncio.run(run_all())
    assert all(r.ok and r.result and r.result.stored > 0 for r in results), results
    sizes = handle.batch_sizes.remote().result()
    assert sum(sizes) == 16 and max(sizes) > 1, sizes  # the users reached the pipeline as shared batches
    for k in range(16):
        assert all(r.source_message_ids[0].startswith(f"u{k}-") for r in RecordLog(files, "t", f"u{k}").read())
    serve.delete("extractor")
