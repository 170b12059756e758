"""The Ray Serve application: the HTTP ingress deployment around :func:`serving.api.create_api`.

The ingress is a plain class; :func:`build_app` applies ``serve.ingress`` and ``serve.deployment`` to it. Its
FastAPI app is built on the replica (``__serve_build_asgi_app__``), so the Kafka producer and the shard client
live in the replica's own process and event loop.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from ray import serve

from mnemoflow.config import Settings
from serving.loopback import keep_replica_on_loopback


class ApiIngress:
    """``direct_port``: the replica also answers on that port of ``api_host`` itself (:mod:`serving.direct`); the
    one-machine stack passes ``api_port`` there when its door is the replica's own listener (``api_door``)."""

    def __init__(self, settings: Settings, bootstrap: str, direct_port: int | None = None) -> None:
        keep_replica_on_loopback()
        self._settings = settings
        self._bootstrap = bootstrap
        self._direct_port = direct_port

    def __serve_build_asgi_app__(self) -> FastAPI:
        from actors import ShardClient
        from mnemoflow.tracing import setup_tracing
        from serving.api import create_api
        from serving.bus import KafkaBus
        from serving.health import runtime_checks

        shards = ShardClient(self._settings)
        checks = runtime_checks(self._settings, self._bootstrap, shards)
        tracing = setup_tracing(self._settings, "api")
        bus = KafkaBus(self._bootstrap)
        app = create_api(self._settings, bus, shards.get_state, shards.compact, self._recaller, checks, tracing=tracing)
        if self._direct_port:
            from serving.direct import serve_directly

            serve_directly(app, self._settings.api_host, self._direct_port)
        return app

    def _recaller(self) -> Any:
        """Recall in this replica: the embedder in-process with its query vectors kept (an agent's repeated
        question is embedded once), the atom index opened read-mostly (SQLite in WAL mode lets the extractor
        replica write while this one reads)."""
        from actors.metrics import TimedIndex
        from mnemoflow.embedding.query_cache import QueryCache
        from mnemoflow.index.factory import open_index
        from mnemoflow.memory.recall.recaller import Recaller
        from mnemoflow.skills.index import SkillsIndexSource
        from mnemoflow.storage import LocalFileStore

        embedder, store = open_index(self._settings)
        # The model loads now, with the recaller, not inside the first query's search and its timeout (1 s): a
        # replica's first recall came back empty on a busy machine.
        embedder.embed(["warm up"])
        files = LocalFileStore(self._settings.data_dir)
        skills = SkillsIndexSource(files).index
        return Recaller(store=TimedIndex(store), embedder=QueryCache(embedder), files=files, skills=skills)


def build_app(settings: Settings, bootstrap: str, replicas: int = 1, direct_port: int | None = None) -> Any:
    """The bound Serve application (pass it to ``serve.run``). Replicas are stateless: any of them serves any
    request (writes go to Kafka, session state to the shard actors, reads to files and the atom index); with
    ``direct_port`` each also listens on that port itself (``SO_REUSEPORT``: the kernel spreads connections)."""
    ingress = serve.deployment(name="api", num_replicas=replicas, ray_actor_options={"num_cpus": 0})(
        serve.ingress()(ApiIngress)
    )
    return ingress.bind(settings, bootstrap, direct_port)
