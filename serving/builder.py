"""Serve application builders: what a KubeRay RayService names by ``import_path``, and what ``mnemoflow up`` runs.

Ray Serve takes, as an ``import_path``, a bound application at module level or a builder that takes one ``args``
dict (the application's ``args:`` in ``serveConfigV2``). Each builder here reads the ``MNEMOFLOW_*`` settings of
the Ray pod, applies the overrides in ``args`` and returns one bound application:

==============  ================================  ======================================================
application     import_path                       deployments
==============  ================================  ======================================================
``mnemoflow``   ``serving.builder:api_app``       ``api`` (HTTP ingress at ``/``); creates the actors
``extractor``   ``serving.builder:extractor_app`` ``extractor`` (``@serve.batch`` L1 extraction)
``embedder``    ``serving.builder:embedder_app``  ``embedder`` (batched embeddings)
``llm``         ``serving.builder:llm_app``       ``llm`` (vLLM on a GPU node, or an upstream client)
==============  ================================  ======================================================

The application names matter: the actors and the workers find the model and the extractor by them
(``serve.get_app_handle("llm")``, ``ExtractorClient("extractor")``).

Actors. In a cluster no CLI process owns the SessionShard and UserCurator actors, so :func:`api_app` creates them
*detached* (named, ``get_if_exists``): they outlive the build task, survive a redeploy of the application, and a
second build finds the same ones. The embedded ``mnemoflow up`` calls :func:`ensure_shards` and
:func:`ensure_curators` with ``detached=False``: there the driver owns them and they end with it.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.config import Settings
from mnemoflow.errors import ConfigError

log = logging.getLogger(__name__)

API_APP, EXTRACTOR_APP, EMBEDDER_APP, LLM_APP = "mnemoflow", "extractor", "embedder", "llm"


class BuilderArgs(BaseModel):
    """The ``args`` of one application in ``serveConfigV2``. Unknown keys are refused (a typo must not be ignored).

    Replica counts and autoscaling belong in ``serveConfigV2``'s ``deployments:`` list, which overrides the
    options set in code; ``args`` carries only what the code needs to build the deployments.
    """

    model_config = ConfigDict(extra="forbid")

    settings: dict[str, Any] = Field(
        default_factory=dict, description="Overrides of the MNEMOFLOW_* settings of the Ray pod (field names)."
    )
    actors: bool = Field(True, description="api_app only: make sure the shard and curator actors exist.")
    detached: bool = Field(True, description="Create the actors detached (cluster) or owned by the caller.")
    api_replicas: int = Field(1, ge=1)
    extractor_replicas: int = Field(1, ge=1)
    embedder_replicas: int = Field(1, ge=1)
    max_batch_size: int = Field(16, ge=1, le=1024, description="@serve.batch size of the extractor.")


def parse_args(args: dict[str, Any] | None) -> tuple[BuilderArgs, Settings]:
    """Validate ``args`` and build the settings: environment and config file first, ``args.settings`` on top."""
    parsed = BuilderArgs.model_validate(args or {})
    return parsed, Settings(**parsed.settings)


def _bootstrap(settings: Settings) -> str:
    if not settings.kafka_bootstrap:
        raise ConfigError("the api application needs MNEMOFLOW_KAFKA_BOOTSTRAP (the Kafka bootstrap servers)")
    return settings.kafka_bootstrap


def _lifetime(detached: bool) -> str | None:
    return "detached" if detached else None


def ensure_shards(settings: Settings, *, detached: bool) -> list[Any]:
    """Create or find the ``session_shards`` named SessionShard actors."""
    from actors import build_shards
    from serving.llm import llm_factory

    return build_shards(settings, lifetime=_lifetime(detached), llm_factory=llm_factory(settings))


def ensure_curators(settings: Settings, *, detached: bool) -> list[Any]:
    """Create or find the ``curator_shards`` named UserCurator actors, with the L2 timing from settings."""
    from actors import build_curators
    from mnemoflow.memory.scenes.schedule import L2Timing
    from serving.llm import llm_factory

    s = settings
    timing = L2Timing(
        delay_after_l1=timedelta(seconds=s.l2_delay_after_l1_seconds),
        min_interval=timedelta(seconds=s.l2_min_interval_seconds),
        max_interval=timedelta(seconds=s.l2_max_interval_seconds),
    )
    return build_curators(
        s.curator_shards,
        s.data_dir,
        s.ray_namespace,
        tick_seconds=s.curator_tick_seconds,
        timing=timing,
        llm_factory=llm_factory(s),
        lifetime=_lifetime(detached),
        model_stages=s.model_stages,
    )


def api_app(args: dict[str, Any] | None = None) -> Any:
    """The ``mnemoflow`` application: the HTTP ingress; first makes sure the actors exist (``args.actors``)."""
    return _api(*parse_args(args))


def extractor_app(args: dict[str, Any] | None = None) -> Any:
    return _extractor(*parse_args(args))


def embedder_app(args: dict[str, Any] | None = None) -> Any:
    from serving.embedder import build_embedder_app

    parsed, settings = parse_args(args)
    return build_embedder_app(settings, replicas=parsed.embedder_replicas)


def llm_app(args: dict[str, Any] | None = None) -> Any:
    return _llm(parse_args(args)[1])


def applications(
    settings: Settings,
    bootstrap: str,
    api_replicas: int = 1,
    extractor_replicas: int = 1,
    direct_port: int | None = None,
) -> dict[str, tuple[Any, str | None]]:
    """The embedded shape's applications, in deploy order, as ``name -> (app, route_prefix)``: the builders of the
    cluster with the caller's Settings (which may hold a generated API key found in no environment variable) and
    no actor creation (the caller owns its actors). The local cluster of the scale-out tests asks for replicas;
    ``direct_port``: the API replicas' own listener (the one-machine stack's direct door, ``api_door``)."""
    settings = settings.model_copy(update={"kafka_bootstrap": bootstrap})
    parsed = BuilderArgs(actors=False, detached=False, api_replicas=api_replicas, extractor_replicas=extractor_replicas)
    apps: dict[str, tuple[Any, str | None]] = {}
    if settings.llm_engine != "heuristic":
        apps[LLM_APP] = (_llm(settings), None)
    apps[EXTRACTOR_APP] = (_extractor(parsed, settings), None)
    apps[API_APP] = (_api(parsed, settings, direct_port), "/")
    return apps


def _api(parsed: BuilderArgs, settings: Settings, direct_port: int | None = None) -> Any:
    from serving.app import build_app

    bootstrap = _bootstrap(settings)
    if parsed.actors:  # their llm handle is looked up at the first model call, so the llm app may come later
        ensure_shards(settings, detached=parsed.detached)
        ensure_curators(settings, detached=parsed.detached)
    return build_app(settings, bootstrap, replicas=parsed.api_replicas, direct_port=direct_port)


def _extractor(parsed: BuilderArgs, settings: Settings) -> Any:
    from serving.extractor import build_extractor_app

    return build_extractor_app(settings, replicas=parsed.extractor_replicas, max_batch_size=parsed.max_batch_size)


def _llm(settings: Settings) -> Any:
    from serving.llm import build_llm_app

    if settings.llm_engine == "heuristic":
        raise ConfigError("the llm application needs a model engine (MNEMOFLOW_LLM_ENGINE=vllm|openai|llama_cpp)")
    return build_llm_app(settings)
