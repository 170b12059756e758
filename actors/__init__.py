"""Ray actors: SessionShard (per-session state, sessions hashed onto N shards) and UserCurator (per-user L2/L3,
users hashed onto M curators). Built with :func:`build_shards` and :func:`build_curators`."""

from actors.curator import CuratorClient, build_curators, curator_name
from actors.placement import ShardClient, build_shards, connect_shards, shard_name

__all__ = [
    "CuratorClient",
    "ShardClient",
    "build_curators",
    "build_shards",
    "connect_shards",
    "curator_name",
    "shard_name",
]
