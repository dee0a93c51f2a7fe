"""Heartbeat: the process record Sidekiq's API and Web UI read, stats, and remote signals.

Every ``heartbeat_interval`` seconds (Sidekiq 6.x: 5) the broker gets one ``Beat``: the
counts since the last beat, the busy threads' jobs, the process record (info, busy, quiet,
rss). It answers with a signal sent from outside (TSTP, TERM, TTIN), if any.

A failed beat raises, keeping its counts for the next beat; the worker's heartbeat loop logs
it and carries on. A beat that finds the process record had expired (an outage or a stall
longer than ``process_ttl``) says so: other processes may have taken back this one's claims,
and jobs it is still running may then run twice.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from asynctask import __version__
from asynctask.brokers import Beat, ProcessRecords
from asynctask.brokers.clock import BrokerClock
from asynctask.settings import Settings
from asynctask.worker.stats import Stats

logger = logging.getLogger("asynctask.heartbeat")


@dataclass(frozen=True)
class ProcessInfo:
    identity: str
    hostname: str
    pid: int
    started_at: float

    @classmethod
    def for_this_process(cls) -> ProcessInfo:
        """A new identity for this process, as Sidekiq writes it: ``hostname:pid:random``."""
        hostname = os.environ.get("DYNO") or socket.gethostname()
        pid = os.getpid()
        return cls(f"{hostname}:{pid}:{os.urandom(6).hex()}", hostname, pid, time.time())


@dataclass(eq=False)
class Heartbeat:
    broker: ProcessRecords
    settings: Settings
    info: ProcessInfo
    stats: Stats
    busy: Callable[[], int]
    on_signal: Callable[[str], None]
    clock: BrokerClock
    #: Seconds: the longest the event loop was late since it was last asked.
    loop_lag: Callable[[], float] = lambda: 0.0
    quiet: bool = field(default=False, init=False)
    _beaten: bool = field(default=False, init=False)
    _info_json: str = field(init=False)

    def __post_init__(self) -> None:
        self._info_json = json.dumps(self._info(), separators=(",", ":"), ensure_ascii=False)

    def beat(self) -> None:
        """One heartbeat; a failure raises, and the counts are sent with the next one. It also
        measures the broker's clock, which the worker's due times are compared with."""
        self.clock.measure()
        processed, failed = self.stats.take()
        work = {
            tid: json.dumps(
                {"queue": w.queue, "payload": w.payload.decode("utf-8", "replace"), "run_at": w.run_at},
                separators=(",", ":"),
                ensure_ascii=False,
            )
            for tid, w in self.stats.snapshot().items()
        }
        beat = Beat(
            self.info.identity,
            self._info_json,
            self.busy(),
            self.quiet,
            rss_kb(),
            processed,
            failed,
            work,
            int(self.loop_lag() * 1_000_000),
        )
        try:
            reply = self.broker.beat(beat)
        except BaseException:
            self.stats.restore(processed, failed)
            raise
        if self._beaten and not reply.was_live:
            logger.warning(
                "this process's record had expired (an outage or a stall longer than process_ttl): "
                "other processes may have taken back its claimed jobs, and those it is running "
                "may run twice",
                extra={"fields": {"identity": self.info.identity, "busy": beat.busy}},
            )
        self._beaten = True
        if reply.signal:
            self.on_signal(reply.signal)

    def clear(self) -> None:
        """On shutdown: flush the last counts and leave the process set, as Sidekiq does."""
        processed, failed = self.stats.take()
        try:
            self.broker.clear_process(self.info.identity, processed, failed)
        except self.broker.errors as exc:
            logger.error("could not clear the heartbeat: %s", exc)

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


def rss_kb() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        return 0
