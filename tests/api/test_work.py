"""WorkSet: the jobs running now, from ``:work`` or (Sidekiq 6.4.1) ``:workers``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import redis

from asynctask import Client, QueueSpec, Registry, Settings, job, payload
from asynctask.api import WorkSet
from asynctask.keys import Keys
from asynctask.worker import Worker
from tests.api.conftest import sidekiq_job
from tests.api.stores import Store, write_process
from tests.conftest import wait_until


def work_value(job_dict: payload.JobDict, run_at: int, queue: str = "default") -> str:
    """A busy-thread entry as Sidekiq writes it: the payload is a JSON string inside JSON."""
    return json.dumps(
        {"queue": queue, "payload": payload.dumps(job_dict), "run_at": run_at}, separators=(",", ":")
    )


def test_a_sleeping_job_is_shown(
    store: Store, store_client: Client, registry: Registry, start_store_worker: Callable[..., Worker]
) -> None:
    release = threading.Event()

    @job(name="SleepJob", queue="slow", registry=registry)
    def sleep_job(seconds: float) -> None:
        release.wait(seconds)

    worker = start_store_worker(queues=(QueueSpec("slow"),))
    work = WorkSet(settings=store.settings)
    started = payload.now()
    jid = store_client.push({"class": "SleepJob", "args": [30], "queue": "slow"})
    try:
        (busy,) = wait_until(lambda: list(work), timeout=10)
        assert (busy.identity, busy.queue, busy.jid) == (worker.identity, "slow", jid)
        assert busy.job.klass == "SleepJob" and busy.job.args == [30]
        assert busy.run_at is not None and int(started) <= busy.run_at <= payload.now()
        assert busy.thread_id.isalnum()
        assert work.find(str(jid)) == busy
        assert work.find("0" * 24) is None
        wait_until(lambda: work.size == 1, timeout=10)
    finally:
        release.set()
    wait_until(lambda: list(work) == [] and work.size == 0, timeout=10)


def test_sidekiq_641_workers_hash_is_read_when_work_is_absent(
    conn: redis.Redis, redis_settings: Settings
) -> None:
    keys = Keys(redis_settings.namespace)
    old, new, gone = "vm:1:aaaaaaaaaaaa", "vm:2:bbbbbbbbbbbb", "vm:3:deaddeaddead"
    write_process(conn, keys, old, busy=1)
    write_process(conn, keys, new, busy=1)
    first, second, third = sidekiq_job(), sidekiq_job(queue="critical"), sidekiq_job()
    conn.hset(keys.workers(old), "8j8", work_value(first, 1795264765))
    # Both hashes, as AsyncTask writes them: :work wins.
    conn.hset(keys.work(new), "abc", work_value(second, 1795264760, "critical"))
    conn.hset(keys.workers(new), "abc", work_value(third, 1795264760))
    # A member without a process hash is a dead process: its leftovers are not busy threads.
    conn.sadd(keys.processes, gone)
    conn.hset(keys.work(gone), "zzz", work_value(third, 1795264700))

    works = list(WorkSet(conn, settings=redis_settings))

    assert [(w.identity, w.thread_id, w.queue, w.jid) for w in works] == [
        (new, "abc", "critical", second["jid"]),  # oldest run_at first
        (old, "8j8", "default", first["jid"]),
    ]
    assert works[1].run_at == 1795264765.0
    assert WorkSet(conn, settings=redis_settings).size == 2


def test_unreadable_work_entries_are_listed(store: Store) -> None:
    store.process(
        "vm:1:aaaaaaaaaaaa",
        busy=3,
        work={
            "a": "{nope",
            "b": json.dumps({"queue": "default", "payload": "not a job", "run_at": 5}),
            # Sidekiq < 6.0 stored the payload as an object.
            "c": json.dumps({"queue": "default", "payload": sidekiq_job(jid="c" * 24), "run_at": 7}),
        },
    )
    # A process whose heartbeat expired: what it last ran is not running now.
    store.process("vm:3:deaddeaddead", busy=1, work={"z": work_value(sidekiq_job(), 1795264700)}, alive=False)
    works = {w.thread_id: w for w in WorkSet(settings=store.settings)}
    assert sorted(works) == ["a", "b", "c"]
    assert WorkSet(settings=store.settings).size == 3
    assert works["a"].job.item is None and works["a"].run_at is None and works["a"].queue == ""
    assert works["b"].job.error is not None and works["b"].run_at == 5
    assert works["c"].jid == "c" * 24 and works["c"].job.valid
