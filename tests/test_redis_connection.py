"""Redis connections: what a new one costs, when another library's client may carry
AsyncTask's tracking writes instead of a connection of AsyncTask's own, and a push's round trip
(without redis-py's pipeline) on a connection the server refused or dropped."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from typing import Any

import pytest
import redis
import redis.utils
from redis.backoff import NoBackoff
from redis.retry import Retry

from asynctask import Client, Registry, Settings
from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.redis.connection import connect, same_database
from asynctask.middleware import Chain
from asynctask.tracking import transitions
from asynctask.tracking.status import EventStatus
from tests.chaos.redis_server import private_redis
from tests.conftest import REDIS_URL, run_in_threads, wait_until
from tests.redis_sockets import WatchedConnection


def test_a_new_connection_does_not_read_the_client_library_s_version_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connect(REDIS_URL).ping()

    def unread() -> str:
        raise AssertionError("the package metadata was read for a new connection")

    monkeypatch.setattr(redis.utils, "get_lib_version", unread)
    client = connect(REDIS_URL)
    try:
        assert client.ping()
    finally:
        client.close()


@pytest.mark.parametrize(
    ("client_url", "url", "same"),
    [
        ("redis://127.0.0.1:6379/2", "redis://127.0.0.1:6379/2", True),
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379/0", True),
        ("redis://localhost", "redis://localhost:6379/0", True),
        ("unix:///run/redis.sock?db=1", "unix:///run/redis.sock?db=1", True),
        ("redis://127.0.0.1:6379/2", "redis://127.0.0.1:6379/3", False),
        ("redis://127.0.0.1:6380/0", "redis://127.0.0.1:6379/0", False),
        ("redis://localhost:6379/0", "redis://127.0.0.1:6379/0", False),
        ("redis://:secret@127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", False),
        ("redis://ann:pw@127.0.0.1:6379/0", "redis://bob:pw@127.0.0.1:6379/0", False),
        ("rediss://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", False),
        ("unix:///run/redis.sock?db=1", "unix:///run/other.sock?db=1", False),
    ],
)
def test_two_clients_share_a_database_when_server_database_user_and_transport_match(
    client_url: str, url: str, same: bool
) -> None:
    assert same_database(redis.Redis.from_url(client_url), redis.Redis.from_url(url)) is same


def test_the_tracking_store_writes_through_a_client_of_the_same_database_only(
    redis_settings: Settings, conn: redis.Redis
) -> None:
    broker = RedisBroker(redis_settings)
    try:
        theirs = redis.Redis.from_url(REDIS_URL)
        through = broker.tracking.through(theirs)
        assert through is not broker.tracking
        through.write_transitions([transitions.status("j1", EventStatus.WORKING, "started").encode()])
        assert conn.xlen(broker.keys.tracking_stream) == 1
        other_database = redis.Redis.from_url(REDIS_URL.rsplit("/", 1)[0] + "/15")
        assert broker.tracking.through(other_database) is broker.tracking
        assert broker.tracking.through(object()) is broker.tracking
    finally:
        broker.close()


def test_a_push_refused_by_the_server_leaves_its_connection_in_step(
    redis_client: Client, conn: redis.Redis
) -> None:
    """Both replies of a push (SADD, LPUSH) are read before the refusal is raised: the pooled
    connection's next command reads its own reply."""
    conn.set(redis_client.keys.queues, "not a set")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        redis_client.push({"class": "Refused", "args": []})
    assert json.loads(conn.lpop(redis_client.keys.queue("default")) or b"")["class"] == "Refused"
    conn.delete(redis_client.keys.queues)
    jid = redis_client.push({"class": "Pushed", "args": [1]})
    assert conn.smembers(redis_client.keys.queues) == {b"default"}
    assert json.loads(conn.lpop(redis_client.keys.queue("default")) or b"")["jid"] == jid


def test_a_push_after_the_server_dropped_its_connection_goes_through(
    redis_settings: Settings, registry: Registry, conn: redis.Redis
) -> None:
    client = Client(redis_settings, registry=registry, middleware=Chain())
    try:
        client.push({"class": "First", "args": []})
        # Every connection of the client, the one the next push takes among them.
        for connection in own_connections(conn, client.redis):
            conn.client_kill_filter(_id=connection["id"])
        jid = client.push({"class": "Second", "args": []})
        assert json.loads(conn.lindex(client.keys.queue("default"), 0) or b"")["jid"] == jid
    finally:
        client.close()


def own_connections(conn: redis.Redis, client: redis.Redis) -> list[dict[str, Any]]:
    """The server's entries of ``client``'s connections (they carry its name)."""
    name = client.connection_pool.connection_kwargs["client_name"]
    return [entry for entry in conn.client_list() if entry["name"] == name]


def test_pushes_take_a_connection_per_thread_pushing_at_once_and_close_closes_them(
    redis_settings: Settings, registry: Registry, conn: redis.Redis
) -> None:
    named = redis.Redis.from_url(REDIS_URL, client_name=f"pushes-{uuid.uuid4().hex}")
    client = Client(redis_settings, connection=named, registry=registry, middleware=Chain())
    for n in range(200):
        client.push({"class": "Alone", "args": [n]})
    assert len(own_connections(conn, named)) == 1
    start = threading.Barrier(4)

    def push() -> None:
        start.wait()
        for n in range(200):
            client.push({"class": "Together", "args": [n]})

    run_in_threads(push, 4, None)
    assert 1 <= len(own_connections(conn, named)) <= 4
    assert conn.llen(client.keys.queue("default")) == 1000
    client.close()
    # The server drops a closed connection at its next turn.
    wait_until(lambda: own_connections(conn, named) == [], 5)
    named.close()


@pytest.mark.parametrize("cut", ["read", "write"])
def test_a_push_connection_cut_short_is_never_used_again(
    cut: str, redis_settings: Settings, registry: Registry, conn: redis.Redis
) -> None:
    """A push that failed before its replies were read leaves them on its connection; one that
    failed half-way through its write leaves the server waiting for the rest of a command."""
    watched = redis.Redis.from_url(REDIS_URL, connection_class=WatchedConnection)
    client = Client(redis_settings, connection=watched, registry=registry, middleware=Chain())
    try:
        client.push({"class": "First", "args": []})
        WatchedConnection.reset()
        if cut == "read":
            WatchedConnection.fail_reads = 1
        else:
            WatchedConnection.fail_writes = 1
        with pytest.raises(RuntimeError, match="interrupted"):
            client.push({"class": "Interrupted", "args": []})
        jid = client.push({"class": "Next", "args": []})
        assert WatchedConnection.made == 1
        pushed = [json.loads(job)["class"] for job in conn.lrange(client.keys.queue("default"), 0, -1)]
        assert pushed == (["Next", "Interrupted", "First"] if cut == "read" else ["Next", "First"])
        assert json.loads(conn.lindex(client.keys.queue("default"), 0) or b"")["jid"] == jid
    finally:
        client.close()
        watched.close()


def test_a_forked_child_pushes_on_connections_of_its_own(
    redis_settings: Settings, registry: Registry, conn: redis.Redis
) -> None:
    client = Client(redis_settings, registry=registry, middleware=Chain())
    client.push({"class": "Parent", "args": [-1]})
    child = os.fork()
    if child == 0:
        # The parent pushes on its connection meanwhile: sharing it, the two would read each
        # other's replies.
        code = 1
        try:
            for n in range(500):
                client.push({"class": "Child", "args": [n]})
            code = 0
        finally:
            os._exit(code)
    try:
        for n in range(500):
            client.push({"class": "Parent", "args": [n]})
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert conn.llen(client.keys.queue("default")) == 1001
    finally:
        client.close()


def test_a_push_to_a_server_that_stopped_answering_fails_within_its_reply_timeout(registry: Registry) -> None:
    """The push connection's timeout holds, though Python no longer polls before each read."""
    with private_redis() as server:
        conn = redis.Redis.from_url(server.url, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
        settings = Settings(redis_url=server.url)
        client = Client(settings, connection=conn, registry=registry, middleware=Chain())
        client.push({"class": "First", "args": []})
        outcome: list[BaseException] = []

        def push() -> None:
            try:
                client.push({"class": "Unanswered", "args": []})
            except BaseException as exc:
                outcome.append(exc)

        server.pause()
        try:
            started = time.monotonic()
            pusher = threading.Thread(target=push, daemon=True)
            pusher.start()
            pusher.join(10)
            took = time.monotonic() - started
        finally:
            server.resume()
        assert [type(exc) for exc in outcome] == [redis.TimeoutError]
        assert 0.4 < took < 3
        client.close()
        conn.close()
