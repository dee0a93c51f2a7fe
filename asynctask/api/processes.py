"""ProcessSet: the live worker processes (Ruby or Python) and their remote control."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from asynctask import payload
from asynctask.api.context import Context, Reader, as_text

#: The process hash fields read for each process, in this order.
FIELDS = ("info", "busy", "beat", "quiet", "rss", "rtt_us")
#: Seconds a signal waits in ``<identity>-signals`` for the process's next heartbeat.
SIGNAL_TTL = 60


@dataclass(frozen=True, slots=True)
class Process:
    """One process as of its last heartbeat: the ``info`` JSON plus the per-beat fields."""

    identity: str
    info: dict[str, Any]
    busy: int
    beat: float | None
    #: True once the process was told to quiet (TSTP) or stop (TERM).
    is_quiet: bool
    #: Resident memory in KB.
    rss: int
    #: Round trip to Redis in microseconds.
    rtt_us: int
    context: Context = field(repr=False, compare=False)

    @property
    def hostname(self) -> str:
        return _str(self.info.get("hostname"))

    @property
    def pid(self) -> int:
        return _int(self.info.get("pid"))

    @property
    def tag(self) -> str:
        return _str(self.info.get("tag"))

    @property
    def concurrency(self) -> int:
        return _int(self.info.get("concurrency"))

    @property
    def queues(self) -> list[str]:
        return _strs(self.info.get("queues"))

    @property
    def labels(self) -> list[str]:
        return _strs(self.info.get("labels"))

    @property
    def started_at(self) -> float | None:
        return payload.timestamp(self.info.get("started_at"))

    @property
    def version(self) -> str | None:
        """Sidekiq >= 7.0.2 and AsyncTask say which version they are; Sidekiq 6 does not."""
        version = self.info.get("version")
        return version if isinstance(version, str) else None

    def quiet(self) -> None:
        """Ask the process to finish its current jobs and fetch no more (TSTP)."""
        self.signal("TSTP")

    def stop(self) -> None:
        """Ask the process to shut down (TERM)."""
        self.signal("TERM")

    def dump_threads(self) -> None:
        """Ask the process to log every thread's backtrace (TTIN)."""
        self.signal("TTIN")

    def signal(self, name: str) -> None:
        """Queue a signal; the process pops it at its next heartbeat, as Sidekiq's do."""
        key = self.context.keys.signals(self.identity)
        pipe = self.context.redis.pipeline(transaction=True)
        pipe.lpush(key, name)
        pipe.expire(key, SIGNAL_TTL)
        pipe.execute()


class ProcessSet(Reader):
    """The members of ``processes`` whose heartbeat hash is still alive, sorted by identity.

    Reading it also removes members whose hash expired (a process that died without
    leaving the set), as Sidekiq's ``ProcessSet`` cleanup does.
    """

    def __iter__(self) -> Iterator[Process]:
        return iter(self.processes())

    def processes(self) -> list[Process]:
        """Every live process: one SMEMBERS, then one pipelined HMGET per member."""
        return self._read()[0]

    def _read(self) -> tuple[list[Process], list[str]]:
        redis_, k = self.context.redis, self.context.keys
        identities = sorted(as_text(m) for m in redis_.smembers(k.processes))
        if not identities:
            return [], []
        pipe = redis_.pipeline(transaction=False)
        for identity in identities:
            pipe.hmget(k.process(identity), FIELDS)
        live: list[Process] = []
        stale: list[str] = []
        for identity, values in zip(identities, pipe.execute(), strict=True):
            if values[0] is None:
                stale.append(identity)
            else:
                live.append(self._process(identity, values))
        if stale:
            redis_.srem(k.processes, *stale)
        return live, stale

    def _process(self, identity: str, values: list[Any]) -> Process:
        info_raw, busy, beat, quiet, rss, rtt_us = values
        try:
            info = json.loads(info_raw)
        except ValueError:
            info = {}
        return Process(
            identity=identity,
            info=info if isinstance(info, dict) else {},
            busy=_int(busy),
            beat=payload.timestamp(_float(beat)),
            is_quiet=quiet is not None and as_text(quiet) == "true",
            rss=_int(rss),
            rtt_us=_int(rtt_us),
            context=self.context,
        )

    def get(self, identity: str) -> Process | None:
        """The live process with this identity, or None."""
        values = self.context.redis.hmget(self.context.keys.process(identity), FIELDS)
        return None if values[0] is None else self._process(identity, list(values))

    @property
    def size(self) -> int:
        return len(self.processes())

    def cleanup(self) -> int:
        """Remove members whose heartbeat hash expired; return how many were removed."""
        return len(self._read()[1])

    @property
    def total_concurrency(self) -> int:
        return sum(p.concurrency for p in self.processes())

    @property
    def total_rss(self) -> int:
        """Resident memory of all processes, in KB."""
        return sum(p.rss for p in self.processes())


def _int(value: Any) -> int:
    if isinstance(value, bytes | str):
        try:
            return int(value)
        except ValueError:
            return 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _strs(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
