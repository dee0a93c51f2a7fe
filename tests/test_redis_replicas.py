"""Writes that wait for replicas (``redis_min_replicas``): every command or pipeline that may
write is followed by WAIT on its connection, reads are not, and a write no replica confirmed
fails loudly instead of looking done."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from asynctask import Registry, Settings
from asynctask.async_client import AsyncClient
from asynctask.brokers.redis import RedisBroker, replicas
from asynctask.brokers.redis.async_connection import connect_async
from asynctask.brokers.redis.connection import connect, round_trips
from asynctask.brokers.redis.replicas import FewerReplicas
from asynctask.middleware import Chain
from tests.chaos.redis_server import PrivateRedis, RedisUnavailable, private_redis
from tests.chaos.state import make_client
from tests.conftest import REDIS_URL, private_server, wait_until


class Pair:
    """A private master and its replica."""

    def __init__(self, master: PrivateRedis, replica: PrivateRedis) -> None:
        self.master = master
        self.replica = replica

    def waits(self) -> int:
        """WAIT commands the master ran so far."""
        stats = self.master.client().info("commandstats")
        return int(stats.get("cmdstat_wait", {}).get("calls", 0))


@contextmanager
def replicated() -> Iterator[Pair]:
    with private_redis() as master, private_redis() as replica:
        # Sent at once rather than after redis-server's 5 s wait for more replicas.
        master.client().config_set("repl-diskless-sync-delay", 0)
        client = replica.client()
        client.replicaof("127.0.0.1", master.port)
        wait_until(lambda: client.info("replication").get("master_link_status") == "up", timeout=30)
        client.close()
        yield Pair(master, replica)


@pytest.fixture
def pair() -> Iterator[Pair]:
    yield from private_server(replicated, RedisUnavailable, "a private redis-server and its replica")


def test_writes_wait_for_the_replica_and_reads_do_not(pair: Pair) -> None:
    client = connect(pair.master.url, replicas=1)
    before = pair.waits()
    client.set("a", 1)
    assert pair.waits() == before + 1
    client.get("a")
    client.hgetall("h")
    assert pair.waits() == before + 1, "a read waited for replicas"
    pipe = client.pipeline(transaction=False)
    pipe.incr("n")
    pipe.incr("n")
    assert pipe.execute() == [1, 2]
    assert pair.waits() == before + 2, "a pipeline waits once, after its commands"
    transaction = client.pipeline(transaction=True)
    transaction.incr("n")
    transaction.get("n")
    assert transaction.execute() == [3, b"3"]
    assert pair.waits() == before + 3
    script = client.register_script("return redis.call('incr', KEYS[1])")
    client.script_load(script.script)
    assert pair.waits() == before + 3, "loading a script writes nothing"
    assert script(keys=["n"]) == 4
    assert pair.waits() == before + 4
    replica = pair.replica.client()
    assert replica.get("n") == b"4", "what waited is on the replica"
    client.close()


def test_a_push_waits_in_its_own_round_trip(pair: Pair) -> None:
    client = connect(pair.master.url, replicas=1)
    trips = round_trips(client)
    before = pair.waits()
    assert trips.send([("RPUSH", "q", "a"), ("RPUSH", "q", "b")]) == [1, 2]
    assert pair.waits() == before + 1
    trips.close()
    client.close()


def test_the_asyncio_client_waits_too(pair: Pair) -> None:
    settings = Settings(redis_url=pair.master.url, redis_min_replicas=1)

    async def push() -> list[str | None]:
        client = AsyncClient(settings, registry=Registry(), middleware=Chain())
        try:
            plain = await client.apush({"class": "Plain", "args": [1]})
            scheduled = await client.apush({"class": "Later", "args": [], "at": 4102444800})
        finally:
            await client.aclose()
        return [plain, scheduled]

    async def command() -> None:
        client = connect_async(pair.master.url, replicas=1)
        await client.set("x", 1)
        pipe = client.pipeline(transaction=True)
        pipe.incr("y")
        await pipe.execute()
        await client.aclose()

    before = pair.waits()
    assert all(asyncio.run(push()))
    asyncio.run(command())
    assert pair.waits() >= before + 4
    assert pair.replica.client().llen("queue:default") == 1


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """WAIT gives up after 50 ms: the shared server has no replica to wait for."""
    monkeypatch.setattr(replicas, "WAIT_MS", 50)


@pytest.mark.usefixtures("short_wait")
def test_a_write_no_replica_confirms_fails_loudly(namespace: str) -> None:
    settings = Settings(redis_url=REDIS_URL, namespace=namespace, redis_min_replicas=1)
    client = make_client(settings)
    broker = client.broker
    assert isinstance(broker, RedisBroker)
    key = f"{namespace}:written"
    try:
        # The shared server has no replica: WAIT comes back with 0.
        with pytest.raises(FewerReplicas, match="reached 0 replica"):
            client.push({"class": "Plain", "args": []})
        with pytest.raises(FewerReplicas):
            broker.redis.set(key, 1)
        transaction = broker.redis.pipeline(transaction=True)
        transaction.incr(f"{namespace}:counted")
        with pytest.raises(FewerReplicas):
            transaction.execute()
        # Done on the master all the same: the caller learns it may not survive a failover.
        assert broker.redis.get(key) == b"1"
        assert isinstance(FewerReplicas("x"), redis.RedisError), "the runtime retries it as a store error"
    finally:
        client.close()


@pytest.mark.usefixtures("short_wait")
def test_an_asyncio_write_no_replica_confirms_fails_loudly(namespace: str) -> None:
    settings = Settings(redis_url=REDIS_URL, namespace=namespace, redis_min_replicas=1)

    async def writes() -> list[str]:
        failed = []
        client = AsyncClient(settings, registry=Registry(), middleware=Chain())
        try:
            for item in ({"class": "Plain", "args": []}, {"class": "Later", "args": [], "at": 4102444800}):
                with pytest.raises(FewerReplicas):
                    await client.apush(item)
                failed.append(str(item["class"]))
        finally:
            await client.aclose()
        direct = connect_async(REDIS_URL, replicas=1)
        try:
            with pytest.raises(FewerReplicas):
                await direct.set(f"{namespace}:written", 1)
            failed.append("command")
            transaction = direct.pipeline(transaction=True)
            transaction.incr(f"{namespace}:counted")
            with pytest.raises(FewerReplicas):
                await transaction.execute()
            failed.append("transaction")
        finally:
            await direct.aclose()
        return failed

    assert asyncio.run(writes()) == ["Plain", "Later", "command", "transaction"]


def test_a_sql_broker_refuses_the_setting() -> None:
    with pytest.raises(ValueError, match="redis_min_replicas applies to a Redis broker"):
        Settings(broker_url="sqlite:///jobs.db", redis_min_replicas=1).validated()
    with pytest.raises(ValueError, match="must not be negative"):
        Settings(redis_url=REDIS_URL, redis_min_replicas=-1).validated()


def test_a_client_without_the_setting_never_waits(namespace: str) -> None:
    settings = Settings(redis_url=REDIS_URL, namespace=namespace)
    client = make_client(settings)
    try:
        assert client.push({"class": "Plain", "args": [uuid.uuid4().hex]})
        assert isinstance(client.broker, RedisBroker)
        assert type(client.broker.redis) is redis.Redis
    finally:
        client.close()
