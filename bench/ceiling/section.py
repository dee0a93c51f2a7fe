"""The Redis ceiling: ``redis-benchmark`` on the bench's private Redis for our hot path's commands.

What a worker sends per job was read from the code and from the command-count pass: under
load, nothing but the fetch script (``asynctask/brokers/redis/lua/fetch.lua``), one EVALSHA
that acknowledges the jobs finished since the last call (LREM from the in-flight list) and
claims as many jobs as threads are waiting (LMOVE queue -> in-flight list), with the tracking
transitions (INCRBY + XADD) when tracking is on. Counters, the busy-thread hash and the
process record go with the heartbeat, not with a job; BLMOVE + GET only when the queue is
empty. So the commands measured are:

- ``PING``: the round-trip floor of this machine (client, loopback, event loop);
- ``LPUSH`` of one job payload: the enqueue of ``perform_async`` (SADD + LPUSH, pipelined);
- the fetch EVALSHA claiming 1 job and acknowledging 1 (one thread at a time), claiming
  ``batch`` and acknowledging ``batch`` (what a busy worker of ``-c batch`` threads sends:
  the command-count pass sees one EVALSHA per ~9 jobs at c = 10), and the same with the
  two tracking transitions of each job (``working``, ``finish``).

The EVALSHA is not written here: a ``ReliableFetch`` (the worker's own class, built by
``RedisBroker.fetcher`` with the worker's identity format) sends it once for real, its keys
and arguments are captured, and redis-benchmark replays exactly those. Every job's payload
is one that ``Client.push_bulk`` wrote. redis-benchmark replays one command, so the queue is
pre-filled with as many copies of the payload as the run claims (plus one batch, so it
never runs dry) and the in-flight list with one batch (what the acknowledgements remove);
after each run the lengths of both lists (and of the tracking stream) must be exactly what
that many full calls leave, which proves that every call did its whole work. The keys are
the worker's real ones (``queue:default``...). Like every pass of the bench, the ceiling
starts with FLUSHALL of the bench's private Redis; it deletes its keys after each command.

Pipeline 1 (``-P 1``): each worker thread has one request in flight. redis-benchmark runs on
the same 2 cores as redis-server, as a worker would.
"""

from __future__ import annotations

import shlex
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import redis

from asynctask import Client, Settings
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.redis import RedisBroker
from asynctask.keys import Keys
from asynctask.tasks.creation import new_task_id
from asynctask.tracking import transitions
from asynctask.tracking.outbox import pack
from asynctask.tracking.status import EventStatus
from asynctask.worker.heartbeat import ProcessInfo
from bench.core import document, fmt, noop_jobs, tracked_jobs
from bench.core.redis_server import RedisServer

PACKAGE = "redis-tools"
REQUESTS = 200_000
QUICK_REQUESTS = 20_000
#: Jobs per fetch call of the batch variants: the runtime section's command-count pass runs c = 10.
BATCH = 10
QUEUE = "default"
#: Names of the measured commands (``Ceiling.share`` takes one).
PING = "PING"
LPUSH = "LPUSH"
FETCH_ONE = "fetch EVALSHA, 1 job"
FETCH_BATCH = "fetch EVALSHA, batch"
FETCH_TRACKED = "fetch EVALSHA, batch, tracked"
#: Payloads pushed per RPUSH while pre-filling a list.
_FILL_CHUNK = 1000
_TIMEOUT = 600


class CeilingUnavailable(RuntimeError):
    """redis-benchmark is not installed."""


@dataclass
class CommandRun:
    """One command replayed by redis-benchmark, once per repetition."""

    name: str
    #: What one call does, for the table.
    what: str
    jobs_per_call: int
    #: Calls per repetition (``-n``): the batch variants make ``requests / batch`` calls, so
    #: that every fetch variant moves the same number of jobs.
    calls: int
    #: The exact redis-benchmark command line, and the same with payloads abbreviated.
    argv: list[str] = field(default_factory=list)
    shown: str = ""
    ops_per_s: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    #: redis-server's CPU (user + system) per call, µs: its own cost, whatever the client's.
    redis_cpu_us: list[float] = field(default_factory=list)
    #: Key lengths after each repetition, against what exactly ``calls`` full calls leave.
    checks: list[dict[str, int]] = field(default_factory=list)
    error: str = ""

    @property
    def ops(self) -> float:
        """Median calls per second over the repetitions."""
        return statistics.median(self.ops_per_s) if self.ops_per_s else 0.0

    @property
    def jobs_per_s(self) -> float:
        """The ceiling in jobs: median calls per second times jobs per call."""
        return self.ops * self.jobs_per_call


@dataclass
class Ceiling:
    clients: int
    requests: int
    reps: int
    batch: int
    redis_version: str = ""
    benchmark_version: str = ""
    #: Size of the job payload replayed (bytes) and one tracking transition (bytes, average).
    payload_bytes: int = 0
    transition_bytes: int = 0
    commands: list[CommandRun] = field(default_factory=list)
    seconds: float = 0.0

    def get(self, name: str) -> CommandRun:
        for command in self.commands:
            if command.name == name:
                return command
        raise KeyError(name)

    def share(self, jobs_per_s: float, name: str = FETCH_BATCH) -> float:
        """``jobs_per_s`` as a fraction of command ``name``'s ceiling in jobs per second
        (0.0 when that command failed)."""
        ceiling = self.get(name).jobs_per_s
        return jobs_per_s / ceiling if ceiling > 0 else 0.0

    def errors(self) -> list[str]:
        return [f"redis ceiling {c.name}: {c.error}" for c in self.commands if c.error]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for command, raw in zip(self.commands, data["commands"], strict=True):
            raw["ops_median"] = command.ops
            raw["jobs_per_s_median"] = command.jobs_per_s
        return data


def missing() -> str | None:
    """Why ``measure`` cannot run, or None."""
    if shutil.which("redis-benchmark") is None:
        return (
            f"the Redis ceiling needs redis-benchmark: install the Debian package `{PACKAGE}` "
            f"(apt-get install {PACKAGE})"
        )
    return None


def measure(
    server: RedisServer, requests: int, clients: int = 10, *, reps: int = 1, batch: int = BATCH
) -> Ceiling:
    """redis-benchmark on each command, repetitions interleaved (A B C A B C ...).

    Raises ``CeilingUnavailable`` without redis-benchmark; a failed command is reported in its
    ``error``. ``server`` is the bench's private Redis: it is flushed first.
    """
    reason = missing()
    if reason is not None:
        raise CeilingUnavailable(reason)
    started = time.monotonic()
    result = Ceiling(clients, requests, reps, batch)
    result.redis_version = server.version()
    result.benchmark_version = _benchmark_version()
    with server.client() as conn:
        bench = _Bench(conn, server, clients)
        conn.flushall()
        try:
            plain = bench.payload({"class": noop_jobs.NAME, "args": []})
            tracked = bench.payload({"class": tracked_jobs.NAME, "args": [[0]], "task": new_task_id()})
            pair = [
                transitions.status("0" * 24, EventStatus.WORKING, "started").encode(),
                transitions.status("0" * 24, EventStatus.FINISH, "finished").encode(),
            ]
            result.payload_bytes = len(plain)
            result.transition_bytes = sum(len(t) for t in pair) // len(pair)
            calls = max(1, requests // batch)
            steps: list[tuple[CommandRun, Callable[[CommandRun], None]]] = [
                (CommandRun(PING, "round trip, no work", 0, requests), bench.ping),
                (
                    CommandRun(LPUSH, "push one job payload onto a queue", 1, requests),
                    partial(bench.lpush, plain),
                ),
                (
                    CommandRun(FETCH_ONE, "ack 1 job (LREM) + claim 1 (LMOVE)", 1, requests),
                    partial(bench.fetch, plain, 1, []),
                ),
                (
                    CommandRun(FETCH_BATCH, f"ack {batch} jobs + claim {batch}", batch, calls),
                    partial(bench.fetch, plain, batch, []),
                ),
                (
                    CommandRun(
                        FETCH_TRACKED,
                        f"ack {batch} + claim {batch} + {2 * batch} transitions (INCRBY + XADD)",
                        batch,
                        calls,
                    ),
                    partial(bench.fetch, tracked, batch, pair * batch),
                ),
            ]
            result.commands = [command for command, _ in steps]
            for _ in range(reps):
                for command, step in steps:
                    if command.error:
                        continue
                    try:
                        step(command)
                    except (RuntimeError, redis.RedisError, subprocess.SubprocessError) as exc:
                        command.error = f"{type(exc).__name__}: {exc}"
                    finally:
                        conn.delete(*bench.ours)
        finally:
            conn.delete(*bench.ours, bench.keys.queues)
    result.seconds = time.monotonic() - started
    return result


class _Recorder(redis.Redis):
    """A connection that remembers the last EVALSHA it sent (and still sends it)."""

    last: tuple[Any, ...] = ()

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args and str(args[0]).upper() == "EVALSHA":
            self.last = args
        # redis-py leaves execute_command unannotated.
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


class _Bench:
    """The steps of ``measure``: lists filled, commands replayed, key lengths checked."""

    def __init__(self, conn: redis.Redis, server: RedisServer, clients: int) -> None:
        self.conn, self.server, self.clients = conn, server, clients
        self.keys = Keys()
        self.identity = ProcessInfo.for_this_process().identity
        self.queue = self.keys.queue(QUEUE)
        self.inflight = self.keys.inflight(self.identity, QUEUE)
        self.ours = [self.queue, self.inflight, self.keys.tracking_stream, self.keys.tracking_seq]

    def payload(self, item: dict[str, Any]) -> bytes:
        """A job payload exactly as the client writes it (pushed, then taken back)."""
        client = Client(Settings(redis_url=self.server.url), connection=self.conn)
        client.push_bulk({**item, "args": [item["args"]]})
        found = self.conn.rpop(self.queue)
        if not isinstance(found, bytes):
            raise RuntimeError("the client's push did not reach the queue")
        return found

    def ping(self, run: CommandRun) -> None:
        self._bench(run, ["PING"], b"", [])

    def lpush(self, job: bytes, run: CommandRun) -> None:
        self._bench(run, ["LPUSH", self.queue, job.decode()], job, [])
        self._check(run, {"queue_left": (int(self.conn.llen(self.queue)), run.calls)})

    def fetch(self, job: bytes, batch: int, pending: list[str], run: CommandRun) -> None:
        # One batch for the captured call, one per replayed call, one left at the end.
        _fill(self.conn, self.queue, job, batch * (run.calls + 2))
        _fill(self.conn, self.inflight, job, batch)
        argv = self._capture(job, batch, pending)
        self._bench(run, argv, job, pending)
        self._check(
            run,
            {
                "queue_left": (int(self.conn.llen(self.queue)), batch),
                "inflight_left": (int(self.conn.llen(self.inflight)), batch),
                "stream_entries": (
                    int(self.conn.xlen(self.keys.tracking_stream)),
                    run.calls + 1 if pending else 0,
                ),
            },
        )

    def _capture(self, job: bytes, batch: int, pending: list[str]) -> list[str]:
        """The worker's own fetch call, sent once for real: its keys and arguments."""
        recorder = _Recorder(connection_pool=self.conn.connection_pool)
        broker = RedisBroker(Settings(redis_url=self.server.url, concurrency=batch), recorder)
        fetcher = broker.fetcher(self.identity)
        acks = [UnitOfWork(QUEUE, job, self.inflight)] * batch
        claimed = fetcher.claim(batch, acks, pending)
        if len(claimed) != batch or not recorder.last:
            raise RuntimeError(f"the captured fetch claimed {len(claimed)} jobs, expected {batch}")
        return [arg.decode() if isinstance(arg, bytes) else str(arg) for arg in recorder.last]

    def _bench(self, run: CommandRun, command: list[str], job: bytes, pending: list[str]) -> None:
        argv = [
            shutil.which("redis-benchmark") or "redis-benchmark",
            "-h", "127.0.0.1", "-p", str(self.server.port),
            "-c", str(self.clients), "-n", str(run.calls), "-P", "1", "--csv", *command,
        ]  # fmt: skip
        run.argv = argv
        run.shown = _shown(argv, job.decode(), pending)
        cpu = _cpu(self.server.pid)
        out = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT)
        used = _cpu(self.server.pid) - cpu
        rows = [line for line in out.stdout.splitlines() if line and not line.startswith('"test"')]
        if out.returncode != 0 or len(rows) != 1:
            text = " ".join((out.stdout + out.stderr).split())[-300:]
            raise RuntimeError(f"redis-benchmark exited with {out.returncode}: {text}")
        # The first field is the command as typed, its quotes not escaped: the 7 numbers
        # (rps, avg, min, p50, p95, p99, max) are taken from the end.
        rps, _avg, _min, p50, _p95, p99, _max = (float(v.strip('"')) for v in rows[0].rsplit(",", 7)[1:])
        run.ops_per_s.append(rps)
        run.p50_ms.append(p50)
        run.p99_ms.append(p99)
        run.redis_cpu_us.append(used / run.calls * 1e6)

    @staticmethod
    def _check(run: CommandRun, found: dict[str, tuple[int, int]]) -> None:
        run.checks.append({name: left for name, (left, _) in found.items()})
        wrong = [f"{name} {left} (expected {want})" for name, (left, want) in found.items() if left != want]
        if wrong:
            raise RuntimeError(f"not every call did its whole work: {', '.join(wrong)}")


def _fill(conn: redis.Redis, key: str, job: bytes, count: int) -> None:
    pipe = conn.pipeline(transaction=False)
    for start in range(0, count, _FILL_CHUNK):
        pipe.rpush(key, *([job] * min(_FILL_CHUNK, count - start)))
    pipe.execute()


def _shown(argv: list[str], job: str, pending: list[str]) -> str:
    """The command line with the long arguments abbreviated (the JSON keeps them whole)."""
    short = [f"<payload {len(job)} B>" if job and a == job else a for a in argv]
    if pending:
        packed = pack(pending)
        label = f"<JSON array of {len(pending)} transitions, {len(packed)} B>"
        short = [label if a == packed else a for a in short]
    short[0] = "redis-benchmark"
    return shlex.join(short)


def _cpu(pid: int) -> float:
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def _benchmark_version() -> str:
    try:
        out = subprocess.run(["redis-benchmark", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip().removeprefix("redis-benchmark ") or "unknown"


def share_lines(ceiling: Ceiling, jobs_per_s: float, label: str) -> list[str]:
    """Markdown: ``label``'s drain rate as a share of each fetch variant's ceiling in jobs/s."""
    lines = []
    for name in (FETCH_BATCH, FETCH_ONE, FETCH_TRACKED):
        command = ceiling.get(name)
        if command.error or not command.jobs_per_s:
            continue
        lines.append(
            f"- {label} drains {fmt.rate(jobs_per_s)} jobs/s = {ceiling.share(jobs_per_s, name):.0%} "
            f"of the ceiling of `{name}` ({command.what}): {fmt.rate(command.ops)} calls/s "
            f"= {fmt.rate(command.jobs_per_s)} jobs/s"
        )
    return lines


def table(ceiling: Ceiling) -> list[str]:
    """Markdown: one row per command, then the exact command lines."""
    c = ceiling
    lines = [
        f"redis-benchmark {c.benchmark_version} against redis-server {c.redis_version} (the bench's "
        f"private one), {c.clients} clients, pipeline 1 (`-P 1`: one request in flight per client, "
        f"as per worker thread), median (min-max) of {c.reps} run(s). Job payload {c.payload_bytes} B "
        f"(as `push_bulk` writes it), tracking transition {c.transition_bytes} B. redis-benchmark "
        "shares the machine's 2 cores with redis-server.",
        "",
    ]
    rows = []
    for r in c.commands:
        if r.error:
            rows.append([r.name, r.what, f"{r.calls:,}", f"FAILED: {r.error}", "", "", "", ""])
            continue
        rows.append(
            [
                r.name,
                r.what,
                f"{r.calls:,}",
                fmt.spread(r.ops_per_s, fmt.rate),
                fmt.spread([x * r.jobs_per_call for x in r.ops_per_s], fmt.rate) if r.jobs_per_call else "-",
                fmt.spread(r.p50_ms, fmt.fixed(3)),
                fmt.spread(r.p99_ms, fmt.fixed(3)),
                fmt.spread(r.redis_cpu_us, fmt.fixed(1)),
            ]
        )
    header = [
        "command",
        "one call",
        "calls/run",
        "calls/s",
        "jobs/s",
        "p50 ms",
        "p99 ms",
        "redis CPU µs/call",
    ]
    lines += fmt.table(header, rows)
    lines += ["", "Command lines (payloads abbreviated; whole in the JSON):", ""]
    lines += [f"- {r.name}: `{r.shown}`" for r in c.commands if r.shown]
    return lines


TITLE = "Redis ceiling"
JSON_FILE = "ceiling.json"


def tables(ceiling: Ceiling) -> str:
    return document.section(TITLE, table(ceiling))


def write(ceiling: Ceiling, out_dir: Path) -> None:
    document.write_section(out_dir, TITLE, tables(ceiling), JSON_FILE, asdict(ceiling))
