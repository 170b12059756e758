"""Creating the shard actors and finding the one that owns a session."""

from __future__ import annotations

import asyncio
import logging
import time
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


def alive_nodes() -> list[str]:
    return sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])


def home_node(index: int, nodes: Sequence[str]) -> str:
    """The node shard ``index`` belongs on: the ``index``-th of ``nodes`` (sorted node ids), round robin."""
    return nodes[index % len(nodes)]


def spread_over_nodes(index: int, nodes: Sequence[str]) -> Any:
    """Shard ``index`` on its :func:`home_node`, softly: losing a node moves only its shards, and a shard whose
    node is gone restarts on another. Ray's "SPREAD" was seen to put all four shards of a two-node cluster on one
    node (zero-CPU actors), which would make that node's loss stop every session."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(home_node(index, nodes), soft=True) if nodes else "DEFAULT"


def _node_of(actor: object) -> str:
    """Runs inside an actor (through ``__ray_call__``): the node it lives on."""
    return str(ray.get_runtime_context().get_node_id())


def _exists(name: str, namespace: str) -> bool:
    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return False
    return True


def build_shards(
    settings: Settings,
    lifetime: str | None = None,
    llm_factory: Callable[[], Any] | None = None,
    *,
    placement_timeout: float = 60.0,
) -> list[Any]:
    """Create (or find) the N named shard actors. They restart on failure and reload from files.

    ``lifetime="detached"`` (the cluster shape) keeps them alive after the creating process ends. ``llm_factory``
    (picklable) reaches the model from inside a shard; None: heuristic summaries, boundaries and canvases.

    A shard created here that lands off its node while that node is alive is created again until it lands there
    (for ``placement_timeout`` seconds, then a warning): the soft affinity falls back to another node when the
    scheduling raylet has not seen the wanted node's resources yet, which a loaded machine or a node that just
    joined makes likely (a clean-clone run put every shard on the head). Shards that already existed are left
    where they are: moving a live shard would cut its calls in flight."""
    remote = ray.remote(SessionShard)
    data_dir = str(settings.data_dir.resolve())
    traces = TraceExport.from_settings(settings)
    ns = settings.ray_namespace
    nodes = alive_nodes()
    fresh = [i for i in range(settings.session_shards) if not _exists(shard_name(i), ns)]

    def create(i: int) -> Any:
        return remote.options(
            name=shard_name(i),
            namespace=ns,
            get_if_exists=True,
            lifetime=lifetime,
            num_cpus=0,
            max_restarts=-1,
            max_task_retries=3,
            scheduling_strategy=spread_over_nodes(i, nodes),
        ).remote(
            i,
            data_dir,
            settings.shard_idle_seconds,
            settings.shard_max_sessions,
            llm_factory,
            traces,
            model_stages=sorted(settings.model_stages),
        )

    handles = [create(i) for i in range(settings.session_shards)]
    deadline = time.monotonic() + placement_timeout
    while nodes:  # no node listed: nothing to place against (the DEFAULT strategy was used)
        placed = ray.get([handles[i].__ray_call__.remote(_node_of) for i in fresh])
        alive = set(alive_nodes())
        misplaced = [i for i, node in zip(fresh, placed, strict=True) if home_node(i, nodes) in alive - {node}]
        if not misplaced:
            break
        if time.monotonic() > deadline:
            log.warning(
                "shards %s are not on their nodes after %.0f s; left where they are", misplaced, placement_timeout
            )
            break
        log.info(
            "shards %s landed off their nodes (the scheduler had not seen them yet): creating them again", misplaced
        )
        for i in misplaced:
            ray.kill(handles[i], no_restart=True)
        time.sleep(0.5)
        for i in misplaced:
            while _exists(shard_name(i), ns) and time.monotonic() < deadline:
                time.sleep(0.1)
            handles[i] = create(i)
        fresh = misplaced
    ray.get([h.stats.remote() for h in handles])  # wait until every shard is up
    log.info("%d session shards ready on %d nodes", len(handles), len(nodes))
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
