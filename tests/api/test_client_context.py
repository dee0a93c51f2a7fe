"""Readers made over a client's own broker (``of_client``, as the HTTP API makes them): they read
what the store holds, through the client's connection or pool, and a reader made that way is set
up as fully as one made from settings."""

from __future__ import annotations

import re

import pytest

from asynctask import Client, Registry
from asynctask.api import DeadSet, Queue, RetrySet, Stats
from asynctask.api.reader import of_client
from asynctask.brokers.sql import SqlBroker
from asynctask.brokers.sql.reads import SqlReader
from asynctask.middleware import Chain
from tests.api.conftest import sidekiq_job
from tests.api.stores import SqlStore, Store
from tests.webapi.conftest import close_watchers
from webapi import create_app
from webapi.resources import EXTENSION


def test_readers_over_a_client_s_broker_read_its_store(store: Store, store_client: Client) -> None:
    store.push(sidekiq_job(), "mail")
    store.add("retry", sidekiq_job(), 100.0)
    store.set_stat("processed", 7)
    context = of_client(store_client)

    stats = Stats.over(context)
    assert (stats.processed, stats.retry_size) == (7, 1)
    assert stats.refresh().processed == 7
    assert RetrySet.over(context).key == RetrySet(settings=store.settings).key
    assert RetrySet.over(context).size == 1
    assert DeadSet.over(context).size == 0
    assert [queue.name for queue in Queue.all_over(context)] == ["mail"]
    assert Queue.over(context, "mail").size == 1
    assert Queue.over(context, "mail") == Queue("mail", settings=store.settings)


def test_the_api_reads_a_sql_broker_through_the_client_s_own_pool(
    sql_store: SqlStore, registry: Registry
) -> None:
    client = Client(sql_store.settings, registry=registry, middleware=Chain())
    app = create_app({"settings": sql_store.settings}, client=client, engine=sql_store.engine)
    try:
        found = app.extensions[EXTENSION]
        assert isinstance(client.broker, SqlBroker)
        for backend in (found.broker_context.backend, found.busy_keys.backend, found.periodic.backend):
            assert isinstance(backend, SqlReader) and backend.engine is client.broker.engine
    finally:
        close_watchers([app])
        client.broker.close()


def test_a_client_of_the_sql_broker_has_no_redis_views(sql_store: SqlStore, registry: Registry) -> None:
    client = Client(sql_store.settings, registry=registry, middleware=Chain())
    try:
        with pytest.raises(
            AttributeError, match=re.escape(f"the broker at {sql_store.settings.broker!r} is not Redis")
        ):
            client.redis  # noqa: B018
        with pytest.raises(AttributeError, match="is not Redis"):
            client.keys  # noqa: B018
    finally:
        client.broker.close()
