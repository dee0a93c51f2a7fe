"""ProcessSet: the live worker processes (Ruby or Python) and their remote control."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from asynctask import payload
from asynctask.api.fields import Field, number, text, text_or_empty, texts
from asynctask.api.reader import Context, Reader
from asynctask.brokers.reads import ProcessRecord


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
    #: Round trip to the broker in microseconds.
    rtt_us: int
    #: The longest its event loop was late between its last two beats, in microseconds (0
    #: for a process that runs no async job: see docs/guide/asyncio.md).
    loop_lag_us: int
    context: Context = field(repr=False, compare=False)

    def get(self, key: str, default: Any = None) -> Any:
        """The ``info`` value under ``key``."""
        return self.info.get(key, default)

    hostname = Field(text_or_empty)
    pid = Field(number)
    tag = Field(text_or_empty)
    concurrency = Field(number)
    queues = Field(texts)
    labels = Field(texts)
    started_at = Field(payload.timestamp)
    #: Sidekiq >= 7.0.2 and AsyncTask say which version they are; Sidekiq 6 does not.
    version = Field(text)

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
        self.context.backend.signal(self.identity, name)


class ProcessSet(Reader):
    """The live worker processes (heartbeat not expired), sorted by identity.

    On Redis, reading it also removes members of ``processes`` whose hash expired (a process
    that died without leaving the set), as Sidekiq's ``ProcessSet`` cleanup does.
    """

    def __iter__(self) -> Iterator[Process]:
        return iter(self.processes())

    def processes(self) -> list[Process]:
        """Every live process (on Redis: one SMEMBERS, then one pipelined HMGET per member)."""
        return [self._process(record) for record in self.backend.processes()]

    def _process(self, record: ProcessRecord) -> Process:
        try:
            info = json.loads(record.info)
        except ValueError:
            info = {}
        return Process(
            identity=record.identity,
            info=info if isinstance(info, dict) else {},
            busy=record.busy,
            beat=payload.timestamp(record.beat),
            is_quiet=record.quiet,
            rss=record.rss,
            rtt_us=record.rtt_us,
            loop_lag_us=record.loop_lag_us,
            context=self.context,
        )

    def listened_queues(self) -> frozenset[str]:
        """The queues some live process takes jobs from (one read of the processes)."""
        return listened(self.processes())

    def get(self, identity: str) -> Process | None:
        """The live process with this identity, or None."""
        record = self.backend.process(identity)
        return None if record is None else self._process(record)

    @property
    def size(self) -> int:
        return len(self.processes())

    def cleanup(self) -> int:
        """Forget processes whose heartbeat expired; return how many were removed."""
        return self.backend.cleanup_processes()

    @property
    def total_concurrency(self) -> int:
        return sum(p.concurrency for p in self.processes())

    @property
    def total_rss(self) -> int:
        """Resident memory of all processes, in KB."""
        return sum(p.rss for p in self.processes())


def listened(processes: Iterable[Process]) -> frozenset[str]:
    """The queues these processes take jobs from. A quiet process takes no more, so its queues
    count only if another process listens to them too."""
    return frozenset(queue for process in processes if not process.is_quiet for queue in process.queues)
