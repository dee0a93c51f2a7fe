"""BusyKeys: the concurrency keys whose jobs hold slots or wait in their line."""

from __future__ import annotations

from collections.abc import Iterator

from redis import Redis

from asynctask.api.reader import Reader
from asynctask.brokers.reads import BusyKey
from asynctask.keys import Keys
from asynctask.settings import Settings

#: Busy keys read from the store when only those under a prefix are wanted: the store orders
#: keys by how busy they are, not by name, so the prefix is applied to the busiest this many.
PREFIX_SCAN = 10_000


class BusyKeys(Reader):
    """Keys with jobs holding slots (queued to run, running, or awaiting a retry under
    ``"hold"``) or waiting for one, those with most waiting first."""

    def __iter__(self) -> Iterator[BusyKey]:
        return iter(self.busiest())

    def busiest(self, limit: int = 100, *, prefix: str = "") -> list[BusyKey]:
        """Up to ``limit`` busy keys; with ``prefix``, only keys that start with it, shown
        without it (among the busiest ``PREFIX_SCAN`` keys of the store)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        if not prefix:
            return self.backend.busy_keys(limit)
        found = [
            BusyKey(busy.key[len(prefix) :], busy.limit, busy.holders, busy.waiting)
            for busy in self.backend.busy_keys(max(limit, PREFIX_SCAN))
            if busy.key.startswith(prefix)
        ]
        return found[:limit]


def busy_keys(
    limit: int = 100,
    *,
    prefix: str = "",
    connection: Redis | None = None,
    keys: Keys | None = None,
    settings: Settings | None = None,
) -> list[BusyKey]:
    """``BusyKeys(connection, keys, settings=settings).busiest(limit, prefix=prefix)``."""
    return BusyKeys(connection, keys, settings=settings).busiest(limit, prefix=prefix)
