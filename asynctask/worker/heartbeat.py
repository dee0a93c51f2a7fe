"""Heartbeat: the process record Sidekiq's API and Web UI read, stats, and remote signals.

Every ``heartbeat_interval`` seconds (Sidekiq 6.x: 5):

1. one MULTI: flush ``stat:processed``/``stat:failed`` (lifetime and daily, 5-year TTL) and
   rewrite the busy-thread hash under both ``<identity>:workers`` (Sidekiq <= 6.4.1) and
   ``<identity>:work`` (>= 6.4.2);
2. PING, to measure ``rtt_us``;
3. one MULTI: ``SADD processes``, the ``<identity>`` hash (info, busy, beat, quiet, rss,
   rtt_us) with its TTL, and ``RPOP <identity>-signals`` (TSTP, TERM, TTIN sent from outside).

Redis errors are logged and the counts kept for the next beat; the worker keeps running.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis

from asynctask import __version__
from asynctask.brokers.redis import RedisBroker
from asynctask.settings import Settings
from asynctask.worker.stats import Stats

logger = logging.getLogger("asynctask.heartbeat")

#: Daily stat keys live five years, as in Sidekiq.
STATS_TTL = 5 * 365 * 24 * 3600


@dataclass(frozen=True)
class ProcessInfo:
    identity: str
    hostname: str
    pid: int
    started_at: float

    @classmethod
    def for_this_process(cls) -> ProcessInfo:
        hostname = os.environ.get("DYNO") or socket.gethostname()
        pid = os.getpid()
        return cls(f"{hostname}:{pid}:{os.urandom(6).hex()}", hostname, pid, time.time())


class Heartbeat:
    def __init__(
        self,
        broker: RedisBroker,
        settings: Settings,
        info: ProcessInfo,
        stats: Stats,
        busy: Callable[[], int],
        on_signal: Callable[[str], None],
    ) -> None:
        self.broker = broker
        self.settings = settings
        self.info = info
        self.stats = stats
        self.busy = busy
        self.on_signal = on_signal
        self.quiet = False
        self._info_json = json.dumps(self._info(), separators=(",", ":"), ensure_ascii=False)

    def beat(self) -> None:
        """One heartbeat; never raises for Redis trouble (it is logged)."""
        try:
            self._flush_stats_and_work()
            signal = self._write_process()
        except redis.RedisError as exc:
            logger.error("heartbeat failed: %s", exc, extra={"fields": {"identity": self.info.identity}})
            return
        if signal:
            self.on_signal(signal)

    def clear(self) -> None:
        """On shutdown: flush the last counts and leave the process set, as Sidekiq does."""
        keys = self.broker.keys
        try:
            self._flush_stats_and_work()
            pipe = self.broker.redis.pipeline(transaction=False)
            pipe.srem(keys.processes, self.info.identity)
            pipe.unlink(keys.workers(self.info.identity), keys.work(self.info.identity))
            pipe.execute()
        except redis.RedisError as exc:
            logger.error("could not clear the heartbeat: %s", exc)

    def _flush_stats_and_work(self) -> None:
        keys = self.broker.keys
        identity = self.info.identity
        processed, failed = self.stats.take()
        busy = {
            tid: json.dumps(
                {"queue": w.queue, "payload": w.payload.decode("utf-8", "replace"), "run_at": w.run_at},
                separators=(",", ":"),
                ensure_ascii=False,
            )
            for tid, w in self.stats.snapshot().items()
        }
        pipe = self.broker.redis.pipeline(transaction=True)
        for total, daily, count in (
            (keys.stat_processed, keys.stat_processed_day(), processed),
            (keys.stat_failed, keys.stat_failed_day(), failed),
        ):
            if count:
                pipe.incrby(total, count)
                pipe.incrby(daily, count)
                pipe.expire(daily, STATS_TTL)
        for work_key in (keys.workers(identity), keys.work(identity)):
            pipe.unlink(work_key)
            if busy:
                pipe.hset(work_key, mapping=cast("Mapping[Any, Any]", busy))
                pipe.expire(work_key, self.settings.process_ttl)
        try:
            pipe.execute()
        except redis.RedisError:
            self.stats.restore(processed, failed)
            raise

    def _write_process(self) -> str | None:
        keys = self.broker.keys
        identity = self.info.identity
        conn = self.broker.redis
        start = time.perf_counter()
        conn.ping()
        rtt_us = int((time.perf_counter() - start) * 1_000_000)
        pipe = conn.pipeline(transaction=True)
        pipe.sadd(keys.processes, identity)
        pipe.hset(
            keys.process(identity),
            mapping={
                "info": self._info_json,
                "busy": self.busy(),
                "beat": repr(time.time()),
                "rtt_us": rtt_us,
                "quiet": "true" if self.quiet else "false",
                "rss": _rss_kb(),
            },
        )
        pipe.expire(keys.process(identity), self.settings.process_ttl)
        pipe.rpop(keys.signals(identity))
        signal = pipe.execute()[-1]
        return signal.decode() if signal else None

    def _info(self) -> dict[str, object]:
        s = self.settings
        queues = list(dict.fromkeys(q.name for q in s.queues))
        return {
            "hostname": self.info.hostname,
            "started_at": self.info.started_at,
            "pid": self.info.pid,
            "tag": s.tag,
            "concurrency": s.concurrency,
            "queues": queues,
            "weights": [{q.name: q.weight for q in s.queues}],
            "labels": list(s.labels),
            "identity": self.info.identity,
            "version": f"asynctask-{__version__}",
        }


def _rss_kb() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        return 0
