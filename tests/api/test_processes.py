"""ProcessSet and Process: live workers, cleanup of dead members, remote control through the heartbeat."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable

import redis

from asynctask import Settings, payload
from asynctask.api import ProcessSet
from asynctask.keys import Keys
from asynctask.worker import Worker
from tests.api.stores import Store, write_process
from tests.conftest import wait_until

#: Sidekiq 6.4.1's process info, as captured.
CAPTURED_INFO = (
    '{"hostname":"vm","started_at":1795264762.4627862,"pid":11876,"tag":"","concurrency":2,'
    '"queues":["critical","default"],"labels":[],"identity":"vm:11876:ca15f21e76a1"}'
)


def test_a_started_worker_is_listed(store: Store, start_store_worker: Callable[..., Worker]) -> None:
    worker = start_store_worker(tag="billing", labels=("blue", "green"))
    (process,) = ProcessSet(settings=store.settings)

    assert process.identity == worker.identity
    assert (process.hostname, process.pid) == (worker.info.hostname, os.getpid())
    assert (process.tag, process.labels, process.concurrency) == ("billing", ["blue", "green"], 4)
    assert process.queues == ["default"]
    assert process.started_at == worker.info.started_at
    assert process.beat is not None and abs(payload.now() - process.beat) < 5
    assert (process.busy, process.is_quiet) == (0, False)
    assert process.rss > 0 and process.rtt_us >= 0
    assert (process.version or "").startswith("asynctask-")
    assert ProcessSet(settings=store.settings).size == 1


def test_quiet_then_stop_take_effect_through_the_heartbeat(
    store: Store, start_store_worker: Callable[..., Worker]
) -> None:
    worker = start_store_worker()
    processes = ProcessSet(settings=store.settings)
    (process,) = processes

    process.quiet()
    wait_until(lambda: [p.is_quiet for p in processes] == [True], timeout=10)
    assert worker.manager.quieting.is_set()

    process.stop()
    wait_until(lambda: processes.size == 0, timeout=15)
    assert worker._stopped.is_set()
    # Gone by name too, not only from the list, though Redis keeps its record until its TTL.
    assert processes.get(worker.identity) is None


def test_dump_threads_makes_the_worker_log_its_threads(
    store: Store, start_store_worker: Callable[..., Worker]
) -> None:
    logged: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    handler = Collect(logging.WARNING)
    logger = logging.getLogger("asynctask.worker")
    logger.addHandler(handler)
    try:
        start_store_worker()
        (process,) = ProcessSet(settings=store.settings)
        process.dump_threads()
        wait_until(lambda: any(m.startswith("thread asynctask-heartbeat") for m in logged), timeout=10)
    finally:
        logger.removeHandler(handler)
    assert store.signals(process.identity) == []


def test_signals_wait_in_order_for_the_next_beat(store: Store) -> None:
    store.process("vm:11876:ca15f21e76a1")
    (process,) = ProcessSet(settings=store.settings)
    process.quiet()
    process.stop()
    assert store.signals(process.identity) == ["TSTP", "TERM"]


def test_a_redis_signal_waits_sixty_seconds(conn: redis.Redis, redis_settings: Settings) -> None:
    keys = Keys(redis_settings.namespace)
    write_process(conn, keys, "vm:11876:ca15f21e76a1")
    (process,) = ProcessSet(conn, settings=redis_settings)
    process.quiet()
    key = keys.signals(process.identity)
    assert key == f"{redis_settings.namespace}:vm:11876:ca15f21e76a1-signals"
    assert conn.lrange(key, 0, -1) == [b"TSTP"]
    assert 55 <= int(conn.ttl(key)) <= 60


def test_a_sidekiq_process_record_is_read(conn: redis.Redis, redis_settings: Settings) -> None:
    keys = Keys(redis_settings.namespace)
    identity = "vm:11876:ca15f21e76a1"
    conn.sadd(keys.processes, identity)
    conn.hset(
        keys.process(identity),
        mapping={
            "info": CAPTURED_INFO,
            "busy": 1,
            "beat": "1795264762.4649653",
            "rtt_us": 551,
            "quiet": "true",
            "rss": 29676,
        },
    )
    conn.expire(keys.process(identity), 60)

    process = ProcessSet(conn, settings=redis_settings).get(identity)

    assert process is not None
    assert (process.hostname, process.pid, process.tag, process.concurrency) == ("vm", 11876, "", 2)
    assert (process.queues, process.labels, process.version) == (["critical", "default"], [], None)
    assert (process.started_at, process.beat) == (1795264762.4627862, 1795264762.4649653)
    assert (process.busy, process.is_quiet, process.rss, process.rtt_us) == (1, True, 29676, 551)
    assert ProcessSet(conn, settings=redis_settings).get("vm:1:000000000000") is None


def test_dead_processes_are_skipped_and_cleaned_up(store: Store) -> None:
    store.process("vm:1:aaaaaaaaaaaa", busy=3)
    store.process("vm:2:bbbbbbbbbbbb", info={"concurrency": 5})
    store.process("vm:3:deaddeaddead", alive=False)
    store.process("vm:4:deaddeaddead", alive=False)

    processes = ProcessSet(settings=store.settings)
    assert processes.cleanup() == 2
    assert [p.identity for p in processes] == ["vm:1:aaaaaaaaaaaa", "vm:2:bbbbbbbbbbbb"]
    assert processes.total_concurrency == 15
    assert processes.total_rss == 2 * 29676
    assert processes.get("vm:3:deaddeaddead") is None
    assert processes.get("vm:1:aaaaaaaaaaaa") == processes.processes()[0]

    store.process("vm:6:deaddeaddead", alive=False)
    assert processes.cleanup() == 1
    assert processes.size == 2


def test_redis_members_without_a_hash_are_removed_when_read(
    conn: redis.Redis, redis_settings: Settings
) -> None:
    keys = Keys(redis_settings.namespace)
    write_process(conn, keys, "vm:1:aaaaaaaaaaaa", busy=3)
    conn.sadd(keys.processes, "vm:3:deaddeaddead")
    conn.sadd(keys.processes, "vm:5:badbadbadbad")
    conn.hset(keys.process("vm:5:badbadbadbad"), mapping={"info": "{not json", "busy": "x"})

    processes = ProcessSet(conn, settings=redis_settings)
    assert [p.identity for p in processes] == ["vm:1:aaaaaaaaaaaa", "vm:5:badbadbadbad"]
    assert not conn.sismember(keys.processes, "vm:3:deaddeaddead")
    bad = processes.get("vm:5:badbadbadbad")
    assert bad is not None and (bad.info, bad.busy, bad.hostname) == ({}, 0, "")


def test_the_worker_runtime_never_imports_the_api() -> None:
    code = (
        "import sys, asynctask, asynctask.worker, asynctask.cli\n"
        "loaded = [m for m in sys.modules if m.startswith('asynctask.api')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
