"""The runtime checks of ``/health`` with fake actors and a fake index (the real ones run in tests/integration)."""

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from mnemoflow.config import Settings
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.errors import ServiceUnavailable
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ListBus
from serving.deps import ApiDeps
from serving.health import ServeAppProbe, actors_alive, atom_index


class FakeMethod:
    def __init__(self, error: Exception | None) -> None:
        self._error = error

    def remote(self) -> Any:
        async def answer() -> dict[str, int]:
            if self._error is not None:
                raise self._error
            return {"index": 0}

        return answer()


class FakeRouter:
    """Actor #1 is dead; looking up #3 fails as ``ActorRouter.handle`` does for a name that is not there."""

    def __init__(self) -> None:
        self.forgotten: list[int] = []

    def handle(self, index: int) -> Any:
        if index == 3:
            raise ServiceUnavailable("session shard 3 is not running: no such actor")
        return type("Handle", (), {"stats": FakeMethod(RuntimeError("actor died") if index == 1 else None)})()

    def forget(self, index: int) -> None:
        self.forgotten.append(index)


def test_actors_alive_names_the_dead_ones_and_forgets_their_handles() -> None:
    router = FakeRouter()
    with ThreadPoolExecutor(1) as lookup:
        assert asyncio.run(actors_alive(router, 1, lookup)) == "1/1 alive"  # type: ignore[arg-type]
        with pytest.raises(ServiceUnavailable) as failed:
            asyncio.run(actors_alive(router, 4, lookup))  # type: ignore[arg-type]
    assert str(failed.value).startswith("2/4 alive; #1 RuntimeError: actor died; #3 ServiceUnavailable")
    assert router.forgotten == [1, 3]


def test_atom_index_check_reads_through_the_recall_store(tmp_path: Path) -> None:
    store = InMemoryVectorStore(dim=8, embedding_model="hashing-8")
    files = LocalFileStore(tmp_path)
    recaller = Recaller(store=store, embedder=HashingEmbedder(8), files=files)
    deps = ApiDeps(Settings(data_dir=tmp_path), ListBus(), files, recaller_factory=lambda: recaller)
    with ThreadPoolExecutor(1) as query:
        assert asyncio.run(atom_index(deps, query)) == "readable (hashing-8, dim 8)"
        unconfigured = ApiDeps(Settings(data_dir=tmp_path), ListBus(), files)
        with pytest.raises(ServiceUnavailable, match="not configured"):
            asyncio.run(atom_index(unconfigured, query))


def test_a_recaller_build_survives_a_caller_that_gives_up(tmp_path: Path) -> None:
    import threading

    release, builds = threading.Event(), []
    files = LocalFileStore(tmp_path)

    def slow_factory() -> Recaller:
        builds.append(1)
        release.wait(5)
        return Recaller(store=InMemoryVectorStore(dim=8, embedding_model="m"), embedder=HashingEmbedder(8), files=files)

    deps = ApiDeps(Settings(data_dir=tmp_path), ListBus(), files, recaller_factory=slow_factory)

    async def main() -> Recaller:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(deps.recaller(), 0.05)  # a /health deadline
        release.set()
        return await deps.recaller()

    assert asyncio.run(main()).store.embedding_model == "m" and builds == [1]


@pytest.mark.parametrize(
    ("status", "ready"),
    [(200, True), (404, True), (401, False), (403, False), (503, False), (None, False)],
)
def test_an_openai_compatible_upstream_is_ready_when_it_answers_models(status: int | None, ready: bool) -> None:
    import httpx

    from mnemoflow.llm.openai import OpenAIEngine

    seen: list[tuple[str, str | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers.get("authorization")))
        if status is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(status, json={"data": []})

    engine = OpenAIEngine(
        "http://llm:8000", "m", api_key="k", client=httpx.AsyncClient(transport=httpx.MockTransport(answer))
    )
    if ready:
        assert asyncio.run(engine.ping()) == f"http://llm:8000/v1/models answered {status}"
    else:
        with pytest.raises(ServiceUnavailable, match="http://llm:8000/v1/models"):
            asyncio.run(engine.ping())
    assert seen == [("http://llm:8000/v1/models", "Bearer k")]


class SlowCheck:
    """A replica's ``check`` that answers after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def remote(self) -> Any:
        async def answer() -> str:
            await asyncio.sleep(self.delay)
            return "0 runs in flight"

        return answer()


@pytest.mark.parametrize(
    ("delay", "state", "expected"),
    [
        (0.0, ("DEPLOY_FAILED", ""), "0 runs in flight"),  # an answer is taken as it is
        (5.0, ("RUNNING", "HEALTHY"), "busy: no answer within 0.05s, Serve reports it RUNNING/HEALTHY"),
        (5.0, ("RUNNING", "UNHEALTHY"), ServiceUnavailable),
        (5.0, ("NOT_DEPLOYED", ""), ServiceUnavailable),
    ],
)
def test_a_busy_replica_is_judged_by_the_serve_controller(delay: float, state: tuple[str, str], expected: Any) -> None:
    asked: list[str] = []

    def app_state(name: str) -> tuple[str, str]:
        asked.append(name)
        return state

    with ThreadPoolExecutor(1) as lookup:
        probe = ServeAppProbe(lookup, "extractor", busy_after=0.05, app_state=app_state)
        probe._handle = type("Handle", (), {"check": SlowCheck(delay)})()
        if isinstance(expected, str):
            assert asyncio.run(probe()) == expected
        else:
            with pytest.raises(expected, match=f"no answer within 0.05s; Serve reports {state[0]}"):
                asyncio.run(probe())
    assert asked == ([] if delay == 0 else ["extractor"])
