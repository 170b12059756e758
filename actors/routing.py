"""Finding the named actor that owns a key: N actors, key hashed with ``shard_for``, handles looked up lazily."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray

from mnemoflow.errors import ServiceUnavailable
from mnemoflow.sharding import shard_for


class ActorRouter:
    def __init__(self, n: int, namespace: str, name: Callable[[int], str], what: str) -> None:
        self._n, self._namespace, self._name, self._what = n, namespace, name, what
        self._handles: dict[int, Any] = {}

    def handle(self, index: int) -> Any:
        if index not in self._handles:
            try:
                self._handles[index] = ray.get_actor(self._name(index), namespace=self._namespace)
            except ValueError as exc:
                raise ServiceUnavailable(f"{self._what} {index} is not running: {exc}") from exc
        return self._handles[index]

    def forget(self, index: int) -> None:
        """Drop a cached handle whose call failed, so the next call looks the name up again (a new actor)."""
        self._handles.pop(index, None)

    def index_for(self, tenant: str, key: str) -> int:
        return shard_for(f"{tenant}/{key}", self._n)

    def owner(self, tenant: str, key: str) -> Any:
        """The handle of the actor that owns ``tenant/key``."""
        return self.handle(self.index_for(tenant, key))
