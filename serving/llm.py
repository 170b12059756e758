"""The ``llm`` Serve deployment: one engine per replica (vLLM on a GPU node, or a client of an OpenAI-compatible
server, or llama.cpp on CPU), autoscaled by ongoing requests; ``ServeLLM`` is the LLM port over its handle.

The replica runs the whole structured-output contract (validate, retry once, raise), so callers anywhere in the
cluster get validated objects. Token usage is recorded where the engine runs (``usage()`` on the deployment);
the caller's ``ServeLLM.usage`` records each call's stage, latency and outcome as seen from its side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from ray import serve

from actors.metrics import LLMMetrics
from mnemoflow.config import Settings
from mnemoflow.errors import ConfigError
from mnemoflow.llm.factory import build_llm
from mnemoflow.llm.usage import CallRecord, LLMUsage
from mnemoflow.ports.llm import ChatMessage
from serving.loopback import keep_replica_on_loopback

M = TypeVar("M", bound=BaseModel)


def llm_factory(settings: Settings) -> Callable[[], ServeLLM] | None:
    """What actors and the extractor call to reach the model: the ``llm`` Serve application, or None for the
    heuristic engines. Picklable (a module-level function), so actors build the handle where they run."""
    return None if settings.llm_engine == "heuristic" else functools.partial(serve_llm, settings.llm_engine)


class LLMServer:
    def __init__(self, settings: Settings) -> None:
        keep_replica_on_loopback()
        engine = build_llm(settings, LLMUsage(on_record=LLMMetrics(settings.llm_engine).record))
        if engine is None:
            raise ConfigError("the llm deployment needs a model engine; llm_engine='heuristic' uses none")
        self._engine = engine

    async def complete(
        self, messages: list[ChatMessage], output_model: type[M], max_tokens: int, temperature: float, stage: str
    ) -> M:
        return await self._engine.complete(
            messages, output_model, max_tokens=max_tokens, temperature=temperature, stage=stage
        )

    async def check(self) -> str:
        """Readiness of this replica, for ``/health``: an engine with a remote server pings it (``ping``)."""
        ping = getattr(self._engine, "ping", None)
        state = await ping() if ping is not None else f"{type(self._engine).__name__} loaded"
        stages = self._engine.usage.summary()
        return f"{state}; this replica: {stages}" if stages else state

    def usage(self) -> dict[str, Any]:
        return {name: dataclasses.asdict(totals) for name, totals in self._engine.usage.stages().items()}


def build_llm_app(settings: Settings) -> Any:
    """The bound deployment with the autoscaling and GPU options from settings."""
    deployment = serve.deployment(
        name="llm",
        max_ongoing_requests=settings.llm_max_ongoing_requests,
        autoscaling_config={
            "min_replicas": settings.llm_replicas_min,
            "max_replicas": settings.llm_replicas_max,
            "target_ongoing_requests": settings.llm_target_ongoing_requests,
        },
        ray_actor_options={"num_cpus": 0, "num_gpus": settings.llm_num_gpus},
    )
    return deployment(LLMServer).bind(settings)


class ServeLLM:
    """Implements :class:`mnemoflow.ports.LLM` by calling the ``llm`` deployment.

    With no ``handle``, the application's handle is looked up on the first call, not here: the shards and curators
    build this in their constructors, which run before ``mnemoflow up`` starts Serve (a lookup then raised "There
    is no Serve instance running", killed the actor and stopped the stack), and in a cluster before the ``llm``
    application exists. A lookup that fails is tried again on the next call.
    """

    def __init__(self, handle: Any = None, usage: LLMUsage | None = None, app_name: str = "llm") -> None:
        self._handle, self._app_name = handle, app_name
        self.usage = usage if usage is not None else LLMUsage()

    async def _app(self) -> Any:
        if self._handle is None:  # a blocking controller round trip: off the caller's event loop
            self._handle = await asyncio.to_thread(serve.get_app_handle, self._app_name)
        return self._handle

    async def complete(
        self,
        messages: list[ChatMessage],
        output_model: type[M],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        stage: str = "default",
    ) -> M:
        started = time.perf_counter()
        error: str | None = None
        try:
            return await (await self._app()).complete.remote(messages, output_model, max_tokens, temperature, stage)
        except Exception as exc:
            error = type(exc).__name__
            raise
        finally:
            latency = time.perf_counter() - started
            self.usage.record(CallRecord(stage, 0, 0, latency, 1, error is None, error))


def serve_llm(engine: str) -> ServeLLM:
    """The LLM port over the ``llm`` application: a picklable factory for actors (they call it inside, before
    Serve may be running; the handle is resolved on the first call). Calls are counted in the metrics where the
    engine runs; here only the fallbacks, which only the caller sees."""
    return ServeLLM(usage=LLMUsage(on_record=LLMMetrics(engine).record_fallback))
