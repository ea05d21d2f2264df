"""A small least-recently-used cache of built prompts, so each length is searched for once."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["PromptCache"]

V = TypeVar("V")


class PromptCache(Generic[V]):
    """At most ``max_entries`` values; counts hits and misses for the run's report."""

    def __init__(self, max_entries: int = 4096) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries: expected an integer >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get_or_make(self, key: Hashable, make: Callable[[], V]) -> V:
        try:
            value = self._items[key]
        except KeyError:
            self.misses += 1
            value = make()  # a failure caches nothing, so a later call retries
            self._items[key] = value
            if len(self._items) > self.max_entries:
                self._items.popitem(last=False)
            return value
        self.hits += 1
        self._items.move_to_end(key)
        return value
