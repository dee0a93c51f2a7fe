"""BusyKeys: each busy concurrency key with its limit, the jids holding its slots and how many
wait, busiest first, on every backend; a prefix keeps one tenant's keys."""

from __future__ import annotations

from dataclasses import replace

import pytest

from asynctask import Client
from asynctask.api import BusyKey, BusyKeys, busy_keys
from tests.api.stores import Store


def push(client: Client, key: str, limit: int) -> str:
    jid = client.push({"class": "Remote", "args": [], "concurrency_key": key, "concurrency_limit": limit})
    assert jid is not None
    return jid


def test_busy_keys_show_holders_and_waiting(store: Store, store_client: Client) -> None:
    assert BusyKeys(settings=store.settings).busiest() == []
    first = [push(store_client, "device:1", 1) for _ in range(3)]
    pair = [push(store_client, "device:2", 2) for _ in range(2)]
    mine = push(store_client, '"acme"/operator:7', 1)

    keys = BusyKeys(settings=store.settings)
    # The order of a key's holders is the backend's own.
    busy = [replace(b, holders=sorted(b.holders)) for b in keys.busiest()]
    assert busy[0] == BusyKey("device:1", 1, [first[0]], 2)
    assert sorted(busy[1:], key=lambda b: b.key) == [
        BusyKey('"acme"/operator:7', 1, [mine], 0),
        BusyKey("device:2", 2, sorted(pair), 0),
    ]
    assert [b.key for b in keys] == [b.key for b in busy]
    assert keys.busiest(1) == busy[:1]
    assert keys.busiest(prefix='"acme"/') == [BusyKey("operator:7", 1, [mine], 0)]
    assert keys.busiest(prefix='"globex"/') == []
    assert [b.key for b in busy_keys(2, settings=store.settings)] == [b.key for b in busy[:2]]


@pytest.mark.parametrize("limit", [0, -1, True, 1.5])
def test_a_bad_limit_is_refused(store: Store, limit: object) -> None:
    with pytest.raises(ValueError, match="limit"):
        BusyKeys(settings=store.settings).busiest(limit)
