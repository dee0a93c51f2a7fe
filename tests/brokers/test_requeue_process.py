"""``Broker.requeue_process``: what the worker's watchdog has done once the worker is gone."""

from __future__ import annotations

from asynctask import Client, Settings
from asynctask.api import ProcessSet, Queue
from asynctask.brokers import open_broker
from asynctask.brokers.base import Beat


def test_requeue_process_gives_back_a_dead_process_jobs_and_record_and_recovery_takes_a_late_claim(
    client: Client, settings: Settings
) -> None:
    broker = open_broker(settings)
    queue = Queue("default", settings=settings)
    try:
        fetcher = broker.fetcher("dead-one")
        broker.beat(Beat("dead-one", '{"hostname":"h"}', 1, False, 0, 0, 0, {}))
        fetcher.register()
        other = broker.fetcher("alive")
        broker.beat(Beat("alive", '{"hostname":"h"}', 1, False, 0, 0, 0, {}))
        other.register()
        client.push_bulk({"class": "Anything", "args": [[1], [2], [3]]})
        assert fetcher.fetch(None, 0) is not None
        kept = other.fetch(None, 0)
        assert kept is not None and queue.size == 1

        assert broker.requeue_process("dead-one") == 1
        assert queue.size == 2
        assert [p.identity for p in ProcessSet(settings=settings)] == ["alive"]

        # A claim the dead process sent just before it died, run after the give-back, is
        # taken back by the next recovery, without waiting for any heartbeat to expire.
        assert fetcher.fetch(None, 0) is not None
        assert queue.size == 1
        assert broker.recover_orphans("alive") == 1
        assert queue.size == 2
        # The other process's job was never touched.
        assert other.requeue([kept]) == 1 and queue.size == 3
    finally:
        broker.close()
