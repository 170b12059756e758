"""Which shard (and which tool-results partition) owns a session: a stable hash, the same in every process.

Python's ``hash`` is salted per process, so it cannot be used; CRC-32 of the key is stable and cheap. The API
produces a session's tool results to partition ``shard_for(key, partitions)``, so with as many partitions as
shards one Faust partition feeds exactly one SessionShard.
"""

from __future__ import annotations

import zlib


def shard_for(key: str, n: int) -> int:
    if n < 1:
        raise ValueError("n must be at least 1")
    return zlib.crc32(key.encode()) % n


def session_key(tenant: str, session: str) -> str:
    return f"{tenant}/{session}"


def user_key(tenant: str, user: str) -> str:
    return f"{tenant}/{user}"
