"""Redis behind Sentinel: ``redis+sentinel://`` URLs, and clients that follow the master when
Sentinel moves it (a master demoted while its connections stay open included)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.sentinel import MasterNotFoundError

import asynctask
from asynctask import AsyncTracking, Registry, Settings
from asynctask.api import Queue
from asynctask.async_client import AsyncClient
from asynctask.brokers.redis.async_connection import connect_async
from asynctask.brokers.redis.connection import connect, same_database
from asynctask.brokers.redis.sentinel import SentinelURL, parse
from asynctask.db.migrate import upgrade
from asynctask.errors import InvalidSetting
from asynctask.middleware import Chain, TrackingClientMiddleware
from tests.chaos.redis_server import RedisUnavailable
from tests.chaos.sentinel_group import SERVICE, SentinelGroup, sentinel_group
from tests.chaos.state import make_client
from tests.conftest import private_server, wait_until
from tests.processes import free_port


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("redis+sentinel://h1/mymaster", SentinelURL((("h1", 26379),), "mymaster")),
        (
            "redis+sentinel://h1:26380,h2,10.0.0.3:1/mymaster/3",
            SentinelURL((("h1", 26380), ("h2", 26379), ("10.0.0.3", 1)), "mymaster", 3),
        ),
        (
            "redis+sentinel://ann:p%40ss@h1:26379/mymaster/0?sentinel_password=s3",
            SentinelURL((("h1", 26379),), "mymaster", 0, "ann", "p@ss", "s3"),
        ),
        ("REDIS+SENTINEL://:secret@[::1]:26379/m", SentinelURL((("::1", 26379),), "m", 0, None, "secret")),
    ],
)
def test_a_sentinel_url_names_sentinels_service_database_and_passwords(url: str, parsed: SentinelURL) -> None:
    assert parse(url) == parsed
    assert (parse(url).password, parse(url).sentinel_password) == (parsed.password, parsed.sentinel_password)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://h1", "names its Sentinels and the master's service"),
        ("redis+sentinel:///mymaster", "names its Sentinels and the master's service"),
        ("redis+sentinel://h1:port/mymaster", "ports and database are numbers"),
        ("redis+sentinel://h1/mymaster/zero", "ports and database are numbers"),
        ("redis+sentinel://h1/mymaster?ssl=true", "takes only sentinel_password as an option, not ssl"),
    ],
)
def test_a_malformed_sentinel_url_is_one_clear_error_without_the_url(url: str, message: str) -> None:
    with pytest.raises(InvalidSetting, match=message) as raised:
        connect(url)
    assert url not in str(raised.value)


def test_a_sentinel_url_is_a_redis_url_everywhere_one_is_taken() -> None:
    url = "redis+sentinel://h1:26379,h2:26379/mymaster/0"
    assert Settings.from_env({"ASYNCTASK_REDIS_URL": url}).uses_redis
    assert Settings.from_env({"ASYNCTASK_BROKER_URL": url}).uses_redis


def test_clients_of_one_service_share_a_database_and_of_another_do_not() -> None:
    url = "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster/0"
    assert same_database(connect(url), connect("redis+sentinel://127.0.0.1:26380,127.0.0.1:26379/mymaster/0"))
    assert not same_database(
        connect(url), connect("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/other/0")
    )
    assert not same_database(connect(url), connect("redis+sentinel://127.0.0.1:26379/mymaster/0"))
    assert not same_database(connect(url), connect("redis://127.0.0.1:6379/0"))


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    yield from private_server(sentinel_group, RedisUnavailable, "a private Redis Sentinel group")


def _hand_over(group: SentinelGroup) -> None:
    """A failover Sentinel is told to make: the master stays up, and becomes the replica."""
    old = group.master
    group.sentinels[0].client.sentinel_failover(SERVICE)
    group.wait_promoted()

    def demoted() -> bool:
        client = old.client()
        try:
            return bool(client.info("replication")["role"] == "slave")
        except redis.ConnectionError:
            # Sentinel closes the clients of the master it demotes, this one's included.
            return False
        finally:
            client.close()

    wait_until(demoted, timeout=30)


def _queued(group: SentinelGroup) -> int:
    return int(group.master.client().llen("queue:default"))


def _moves(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("the Redis master moved")]


def test_pushes_follow_the_master_sentinel_moved(
    group: SentinelGroup, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(Settings(redis_url=group.url))
    try:
        # The push connection stays open to the master that is demoted next.
        assert client.push({"class": "Before", "args": []})
        assert client.broker.server_time()
        _hand_over(group)
        assert client.push({"class": "After", "args": []})
        assert client.broker.server_time()
        assert _queued(group) == 2
        assert _moves(caplog) == [f"the Redis master moved: Sentinel now names 127.0.0.1:{group.master.port}"]
    finally:
        client.close()


def test_asyncio_pushes_follow_the_master_sentinel_moved(
    group: SentinelGroup, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(redis_url=group.url)

    async def scenario() -> None:
        client = AsyncClient(settings, registry=Registry(), middleware=Chain())
        try:
            assert await client.apush({"class": "Before", "args": []})
            await asyncio.to_thread(_hand_over, group)
            for _ in range(50):
                # The demoted master's connection fails the first push, as a lost one does.
                try:
                    assert await client.apush({"class": "After", "args": []})
                    return
                except redis.ConnectionError:
                    await asyncio.sleep(0.1)
            raise AssertionError("no push reached the new master")
        finally:
            await client.aclose()

    asyncio.run(scenario())
    assert _queued(group) == 2
    assert len(_moves(caplog)) == 1


def test_tasks_created_on_an_event_loop_reach_the_master(group: SentinelGroup, tmp_path: Path) -> None:
    tracking_db = f"sqlite:///{tmp_path / 'tracking.db'}"
    upgrade(tracking_db)
    registry = Registry()

    @asynctask.job(registry=registry)
    def rows(chunk: list[int]) -> None: ...

    settings = Settings(redis_url=group.url, database_url=tracking_db)

    async def create() -> int:
        tracking = AsyncTracking(
            settings,
            registry=registry,
            middleware=Chain([TrackingClientMiddleware()]),
        )
        try:
            task = await tracking.acreate_task(rows, range(50))
            return (await tracking.aget_task(task.id)).total
        finally:
            await tracking.aclose()

    assert asyncio.run(create()) == 50
    # Read back through Sentinel as well (the read API's own client).
    assert Queue("default", settings=settings).size == 50


def test_no_master_found_is_one_line_naming_the_sentinels_asked() -> None:
    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/mymaster/0"
    hosts = ", ".join(url.split("//")[1].split("/")[0].split(","))
    expected = f"no Sentinel names a master 'mymaster' (asked {hosts})"
    client = connect(url)
    with pytest.raises(MasterNotFoundError) as raised:
        client.ping()
    assert str(raised.value) == expected
    client.close()

    async def ping() -> None:
        awaited = connect_async(url)
        try:
            await awaited.ping()
        finally:
            await awaited.aclose()

    with pytest.raises(MasterNotFoundError) as raised:
        asyncio.run(ping())
    assert str(raised.value) == expected
