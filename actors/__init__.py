"""Ray actors: SessionShard (per-session state, sessions hashed onto N shards). Built with :func:`build_shards`."""

from actors.placement import ShardClient, build_shards, connect_shards, shard_name

__all__ = ["ShardClient", "build_shards", "connect_shards", "shard_name"]
