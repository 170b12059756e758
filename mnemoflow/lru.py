"""A small bounded LRU map: the sinks' id caches must not grow with the number of users or sessions."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()

    def get_or_load(self, key: K, load: Callable[[K], V]) -> V:
        try:
            self._items.move_to_end(key)
            return self._items[key]
        except KeyError:
            value = load(key)
            self.put(key, value)
            return value

    def put(self, key: K, value: V) -> None:
        """Insert or replace, as the most recently used; the least recently used goes beyond capacity."""
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._items.pop(key, None)

    def clear(self) -> None:
        self._items.clear()

    def retain(self, keep: Callable[[K], bool]) -> None:
        """Drop every item whose key ``keep`` refuses."""
        for key in [k for k in self._items if not keep(k)]:
            del self._items[key]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)
