"""Creating the shard actors and finding the one that owns a session."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import ray

from actors.routing import ActorRouter
from actors.shard import SessionShard
from mnemoflow.config import Settings
from mnemoflow.errors import InvalidInput
from mnemoflow.offload.entries import SessionAppend
from mnemoflow.offload.replies import CompactRefused, CompactReply
from mnemoflow.offload.session_state import SessionState
from mnemoflow.tracing import TraceExport

log = logging.getLogger(__name__)


def shard_name(index: int) -> str:
    return f"session-shard-{index}"


def spread_over_nodes(index: int) -> Any:
    """Shard ``index`` on the ``index``-th alive node (round robin), softly: losing a node moves only its shards,
    and a shard whose node is gone restarts on another. Ray's "SPREAD" was seen to put all four shards of a
    two-node cluster on one node (zero-CPU actors), which would make that node's loss stop every session."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    return NodeAffinitySchedulingStrategy(nodes[index % len(nodes)], soft=True) if nodes else "DEFAULT"


def build_shards(
    settings: Settings, lifetime: str | None = None, llm_factory: Callable[[], Any] | None = None
) -> list[Any]:
    """Create (or find) the N named shard actors. They restart on failure and reload from files.

    ``lifetime="detached"`` (the cluster shape) keeps them alive after the creating process ends. ``llm_factory``
    (picklable) reaches the model from inside a shard; None: heuristic summaries, boundaries and canvases."""
    remote = ray.remote(SessionShard)
    data_dir = str(settings.data_dir.resolve())
    traces = TraceExport.from_settings(settings)
    handles = [
        remote.options(
            name=shard_name(i),
            namespace=settings.ray_namespace,
            get_if_exists=True,
            lifetime=lifetime,
            num_cpus=0,
            max_restarts=-1,
            max_task_retries=3,
            scheduling_strategy=spread_over_nodes(i),
        ).remote(i, data_dir, settings.shard_idle_seconds, settings.shard_max_sessions, llm_factory, traces)
        for i in range(settings.session_shards)
    ]
    ray.get([h.stats.remote() for h in handles])  # wait until every shard is up
    log.info("%d session shards ready", len(handles))
    return handles


class ShardClient(ActorRouter):
    """Routes calls to the shard that owns a session; looks the named actors up lazily."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings.session_shards, settings.ray_namespace, shard_name, "session shard")

    async def notify(self, appended: list[SessionAppend], *, traceparents: Sequence[str] = ()) -> None:
        """Send each shard the new entries of its sessions, one call per shard, all shards at once (with the
        traces the work continues, when tracing is on)."""
        by_shard: dict[int, list[tuple[str, str, list[str], int]]] = {}
        for a in appended:
            update = (a.tenant, a.session, [e.model_dump_json() for e in a.new_entries], a.last_seq)
            by_shard.setdefault(self.index_for(a.tenant, a.session), []).append(update)
        traced = {"traceparents": list(traceparents)} if traceparents else {}
        await asyncio.gather(*(self.handle(i).sync.remote(u, **traced) for i, u in by_shard.items()))

    async def get_state(self, tenant: str, session: str) -> SessionState:
        return await self.owner(tenant, session).get_state.remote(tenant, session)

    async def compact(self, tenant: str, session: str, messages: list[dict[str, Any]], window: int) -> CompactReply:
        """Compaction runs in the shard that owns the session; a refused request raises InvalidInput."""
        reply = await self.owner(tenant, session).compact.remote(tenant, session, messages, window)
        if isinstance(reply, CompactRefused):
            raise InvalidInput(reply.reason)
        return reply


def connect_shards(settings: Settings) -> ShardClient:
    """Join the Ray cluster at ``settings.ray_address`` (idempotent) and return a client for its shards."""
    if not ray.is_initialized():
        # log_to_driver=False: the worker's log is its own, not a copy of every Ray process's output
        ray.init(
            address=settings.ray_address,
            namespace=settings.ray_namespace,
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    return ShardClient(settings)
