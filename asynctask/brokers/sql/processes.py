"""Worker processes in SQL: heartbeats, stats, signals, and taking back the claims of the dead.

A process is live while its ``asynctask_process`` row's ``expires_at`` (renewed by every
heartbeat, ``process_ttl`` ahead) is in the future. A job locked by a process that is not
live is returned to its queue by whichever live process looks next, after its heartbeat,
as Redis's recovery does with in-flight lists.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from datetime import UTC, datetime

from sqlalchemy import Connection

from asynctask.brokers.base import Beat, BeatReply
from asynctask.brokers.sql.transactions import Store

logger = logging.getLogger("asynctask.recovery")


def write_beat(store: Store, beat: Beat, ttl: int) -> BeatReply:
    """Flush the counts, renew the process record; return the oldest signal sent to it and
    whether the record was live until now (others take back the claims of a lapsed one)."""
    sql = store.sql.processes
    with store.read() as connection:
        start = time.perf_counter()
        connection.execute(store.sql.ping)
        rtt_us = int((time.perf_counter() - start) * 1_000_000)
    now = time.time()
    with store.write() as tx:
        _add_stats(tx.connection, store, beat.processed, beat.failed)
        was_live = bool(
            tx.connection.execute(sql.process_live, {"identity": beat.identity, "now": now}).scalar_one()
        )
        tx.connection.execute(
            sql.beat,
            {
                "identity": beat.identity,
                "info": beat.info,
                "busy": beat.busy,
                "beat": now,
                "quiet": beat.quiet,
                "rss": beat.rss_kb,
                "rtt_us": rtt_us,
                "loop_lag_us": beat.loop_lag_us,
                "now": now,
                "ttl": ttl,
                "work": json.dumps(beat.work, separators=(",", ":"), ensure_ascii=False),
            },
        )
        signal = tx.connection.execute(sql.pop_signal, {"identity": beat.identity}).scalar()
    return BeatReply(None if signal is None else str(signal), was_live)


def clear(store: Store, identity: str, processed: int, failed: int) -> None:
    """A process leaves: its last counts are added, its record and signals removed."""
    with store.write() as tx:
        _add_stats(tx.connection, store, processed, failed)
        tx.connection.execute(store.sql.processes.delete_process, {"identity": identity})
        tx.connection.execute(store.sql.processes.delete_signals, {"identity": identity})


def count(store: Store) -> int:
    with store.read() as connection:
        return int(connection.execute(store.sql.processes.process_count, {"now": time.time()}).scalar_one())


def recover_orphans(store: Store) -> int:
    """Unlock the jobs of processes that are not live, forget dead processes; return how
    many jobs went back to their queues."""
    sql = store.sql.processes
    params = {"now": time.time()}
    with store.write() as tx:
        connection = tx.connection
        if sql.orphans is None:
            taken = [(str(owner), str(queue)) for owner, queue in connection.execute(sql.recover)]
        else:
            taken = [(str(owner), str(queue)) for owner, queue in connection.execute(sql.orphans, params)]
            if taken:
                connection.execute(sql.recover, params)
        connection.execute(sql.forget_dead_processes, params)
        connection.execute(sql.forget_orphan_signals)
        tx.announce(queue for _, queue in taken)
    for (owner, queue), moved in sorted(Counter(taken).items()):
        logger.warning("recovered %d in-flight job(s) of dead process %s to queue %s", moved, owner, queue)
    return len(taken)


def requeue_process(store: Store, identity: str) -> int:
    """Process ``identity`` is dead: unlock its jobs and remove its record and signals, in
    one transaction; return how many jobs went back to their queues.

    A claim the process committed just before it died, and that reached the database after
    this, leaves rows locked by a process with no record: ``recover_orphans`` unlocks them
    at its next look."""
    with store.write() as tx:
        connection = tx.connection
        queues = [str(q) for q in connection.execute(store.sql.give_back, {"me": identity}).scalars()]
        connection.execute(store.sql.processes.delete_process, {"identity": identity})
        connection.execute(store.sql.processes.delete_signals, {"identity": identity})
        tx.announce(queues)
    return len(queues)


def _add_stats(connection: Connection, store: Store, processed: int, failed: int) -> None:
    """Add to the lifetime and today's (UTC) totals, named as Sidekiq names its keys."""
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    rows = [
        {"name": name, "value": value}
        for kind, value in (("processed", processed), ("failed", failed))
        if value
        for name in (kind, f"{kind}:{day}")
    ]
    if rows:
        connection.execute(store.sql.processes.add_stat, rows)
