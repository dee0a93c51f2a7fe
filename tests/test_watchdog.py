"""``asynctask worker`` and its watchdog process: the hard stop past ``-t``, the jobs of a worker
killed by anyone given back at once, no watchdog outliving its worker; recycling after
``--max-jobs`` / ``--max-memory`` in the same process; the signals the worker obeys."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import redis
from sqlalchemy import text

from asynctask import Client, Settings
from asynctask.api import ProcessSet, Queue
from asynctask.api.reader import close_shared
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.keys import Keys
from asynctask.middleware import Chain
from asynctask.worker.watchdog import PROGRAM
from tests.brokers.conftest import read_runs, worker_env
from tests.conftest import wait_until

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "tests" / "jobs" / "watchdog_jobs.py"
#: How long after TERM a worker whose job holds the GIL may take to be gone: the tests' -t (3 s at most)
#: plus the watchdog's 5 s and its half second for the stack dump, with some slack.
HARD_STOP_BOUND = 10.5
#: The most memory the watchdog process may hold.
WATCHDOG_RSS = 11 << 20

Spawn = Callable[..., "subprocess.Popen[bytes]"]


@pytest.fixture
def sqlite_process_settings(tmp_path: Path) -> Iterator[Settings]:
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    upgrade(url)
    yield Settings(broker_url=url, heartbeat_interval=0.5, process_ttl=60)
    close_shared()


@pytest.fixture
def runs_file(tmp_path: Path) -> Path:
    return tmp_path / "runs.txt"


@pytest.fixture
def spawn(tmp_path: Path, runs_file: Path) -> Iterator[Spawn]:
    """Start ``asynctask worker -r tests/jobs/watchdog_jobs.py ARGS...`` in a session of its
    own, logging to ``<tmp>/worker-N.log``; at teardown its whole process group is killed
    (with anything a job left running)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(settings: Settings, *args: str) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "asynctask", "worker", "-r", str(JOBS), *args]
        with open(tmp_path / f"worker-{len(procs)}.log", "wb") as log:
            proc = subprocess.Popen(
                command,
                env=worker_env(settings, ASYNCTASK_TEST_RUNS=str(runs_file)),
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


def watchdog_of(worker: subprocess.Popen[bytes]) -> psutil.Process:
    """The watchdog process of ``worker``."""
    children = psutil.Process(worker.pid).children()
    [watchdog] = [child for child in children if str(PROGRAM) in child.cmdline()]
    return watchdog


def worker_log(tmp_path: Path, index: int = 0) -> str:
    return (tmp_path / f"worker-{index}.log").read_text()


def push(settings: Settings, name: str, *args: object) -> str:
    client = Client(settings, middleware=Chain())
    try:
        jid = client.push({"class": name, "args": list(args)})
    finally:
        client.broker.close()
    assert jid is not None
    return jid


def held_jobs(settings: Settings) -> int:
    """Jobs claimed by some worker process (in flight), whoever holds them."""
    if settings.uses_redis:
        conn = redis.Redis.from_url(settings.redis_url)
        try:
            pattern = Keys(settings.namespace).inflight("*", "*")
            return sum(int(conn.llen(key)) for key in conn.scan_iter(match=pattern))
        finally:
            conn.close()
    engine = create_database_engine(settings.broker)
    try:
        with engine.connect() as connection:
            query = text("SELECT count(*) FROM asynctask_job WHERE locked_by IS NOT NULL")
            return int(connection.execute(query).scalar_one())
    finally:
        engine.dispose()


def wait_registered(settings: Settings) -> None:
    """Wait until the worker process has written its first heartbeat."""
    wait_until(lambda: ProcessSet(settings=settings).size == 1, timeout=15)


@pytest.mark.parametrize(("backend", "timeout"), [("redis", 3.0), ("sqlite", 1.0)])
def test_term_stops_a_worker_whose_job_holds_the_gil_within_the_timeout_and_gives_the_job_back(
    backend: str,
    timeout: float,
    request: pytest.FixtureRequest,
    spawn: Spawn,
    runs_file: Path,
    tmp_path: Path,
) -> None:
    settings: Settings = request.getfixturevalue(f"{backend}_process_settings")
    proc = spawn(settings, "-c", "2", "-t", str(timeout))
    wait_registered(settings)
    jid = push(settings, "hold_gil", 60)
    wait_until(lambda: [(run.event, run.jid) for run in read_runs(runs_file)] == [("start", jid)])
    assert held_jobs(settings) == 1

    stopping = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    # SIGKILLed by its watchdog past the timeout and its grace.
    assert proc.wait(HARD_STOP_BOUND) == -signal.SIGKILL
    assert time.monotonic() - stopping < HARD_STOP_BOUND
    # Given back by the watchdog once the worker is gone: long before the heartbeat expires.
    wait_until(lambda: [str(job.jid) for job in Queue("default", settings=settings)] == [jid], timeout=15)
    assert held_jobs(settings) == 0
    assert ProcessSet(settings=settings).size == 0
    assert "killed it" in worker_log(tmp_path)


def test_the_jobs_of_a_worker_killed_by_anyone_are_given_back_by_its_watchdog(
    redis_process_settings: Settings, spawn: Spawn, runs_file: Path, tmp_path: Path
) -> None:
    proc = spawn(redis_process_settings, "-c", "2")
    wait_registered(redis_process_settings)
    watchdog = watchdog_of(proc)
    jid = push(redis_process_settings, "hold_gil", 60)
    wait_until(lambda: [(run.event, run.jid) for run in read_runs(runs_file)] == [("start", jid)])

    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(5) == -signal.SIGKILL
    # The process record lives 60 s: only the watchdog can have given the job back this soon.
    queue = Queue("default", settings=redis_process_settings)
    wait_until(lambda: [str(job.jid) for job in queue] == [jid], timeout=15)
    assert held_jobs(redis_process_settings) == 0
    assert ProcessSet(settings=redis_process_settings).size == 0
    assert "worker process died without stopping" in worker_log(tmp_path)
    _, alive = psutil.wait_procs([watchdog], timeout=5)
    assert alive == []


def test_the_watchdog_is_small_and_leaves_with_its_worker(
    redis_process_settings: Settings, spawn: Spawn, tmp_path: Path
) -> None:
    proc = spawn(redis_process_settings, "-c", "1")
    wait_registered(redis_process_settings)
    watchdog = watchdog_of(proc)
    # A bare interpreter is about 8.5 MiB here: the watchdog loads a few built-in modules only.
    assert watchdog.memory_info().rss < WATCHDOG_RSS
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(15) == 0
    _, alive = psutil.wait_procs([watchdog], timeout=5)
    assert alive == []
    # Told that the worker ended: it neither took the exit for a death nor gave anything back.
    assert "died" not in worker_log(tmp_path) and "pushed back" not in worker_log(tmp_path)


@pytest.mark.parametrize("name", ["record", "record_async"])
def test_max_jobs_replaces_the_worker_process_after_that_many_jobs(
    name: str, redis_process_settings: Settings, spawn: Spawn, runs_file: Path, tmp_path: Path
) -> None:
    proc = spawn(redis_process_settings, "-c", "1", "-a", "1", "--max-jobs", "3")
    wait_registered(redis_process_settings)
    jids = [push(redis_process_settings, name) for _ in range(7)]
    wait_until(lambda: len(read_runs(runs_file)) >= 7, timeout=30)

    runs = read_runs(runs_file)
    assert Counter(run.jid for run in runs) == Counter(jids), "every job ran, once"
    # One job at a time: each interpreter runs exactly three jobs, then a fresh one takes over,
    # in the same process: the one started, and the pid its process record gives.
    per_image = Counter(run.pid for run in runs)
    assert list(per_image.values()) == [3, 3, 1]
    assert proc.poll() is None
    assert [p.pid for p in ProcessSet(settings=redis_process_settings)] == [proc.pid]
    assert worker_log(tmp_path).count("recycling the worker process: 3 jobs run (max jobs 3)") == 2
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(15) == 0


def test_max_memory_replaces_a_worker_process_a_job_left_above_it(
    redis_process_settings: Settings, spawn: Spawn, runs_file: Path, tmp_path: Path
) -> None:
    proc = spawn(redis_process_settings, "-c", "1", "--max-memory", "150")
    wait_registered(redis_process_settings)
    first = push(redis_process_settings, "record")
    leaking = push(redis_process_settings, "leak", 200)
    last = push(redis_process_settings, "record")
    wait_until(lambda: len(read_runs(runs_file)) >= 3, timeout=30)

    pid = {run.jid: run.pid for run in read_runs(runs_file)}
    assert pid[first] == pid[leaking] != pid[last]
    assert "recycling the worker process: RSS " in worker_log(tmp_path)
    assert "over max memory 150 MB" in worker_log(tmp_path)
    assert proc.poll() is None


def test_a_stop_signal_that_comes_while_the_worker_recycles_ends_it(
    redis_process_settings: Settings, spawn: Spawn, runs_file: Path, tmp_path: Path
) -> None:
    proc = spawn(redis_process_settings, "-c", "1", "--max-jobs", "1")
    wait_registered(redis_process_settings)
    push(redis_process_settings, "stop_own_process")
    assert proc.wait(15) == 0
    assert "recycling the worker process" in worker_log(tmp_path)
    assert ProcessSet(settings=redis_process_settings).size == 0


def test_the_threads_of_a_worker_share_two_malloc_arenas(
    redis_process_settings: Settings, spawn: Spawn, runs_file: Path, tmp_path: Path
) -> None:
    proc = spawn(redis_process_settings, "-c", "10")
    wait_registered(redis_process_settings)
    for _ in range(200):
        push(redis_process_settings, "allocate")
    wait_until(lambda: len(read_runs(runs_file)) == 200, timeout=30)
    push(redis_process_settings, "print_malloc_arenas")
    wait_until(lambda: "Total (incl. mmap):" in worker_log(tmp_path))
    arenas = re.findall(r"^Arena \d+:$", worker_log(tmp_path), re.MULTILINE)
    assert len(arenas) == 2, arenas
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(15) == 0


def test_tstp_and_ttin_reach_the_worker(
    redis_process_settings: Settings, spawn: Spawn, tmp_path: Path
) -> None:
    proc = spawn(redis_process_settings, "-c", "1")
    wait_registered(redis_process_settings)
    os.kill(proc.pid, signal.SIGTTIN)
    # MainThread: the only thread sure to be there (the first heartbeat precedes the others).
    wait_until(lambda: "thread MainThread" in worker_log(tmp_path))
    os.kill(proc.pid, signal.SIGTSTP)
    wait_until(lambda: [p.is_quiet for p in ProcessSet(settings=redis_process_settings)] == [True])
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(15) == 0
    assert ProcessSet(settings=redis_process_settings).size == 0


def test_recycling_bounds_come_from_the_environment_and_must_not_be_negative() -> None:
    env = {"ASYNCTASK_MAX_JOBS": "500", "ASYNCTASK_MAX_MEMORY_MB": "300"}
    settings = Settings.from_env(env)
    assert (settings.max_jobs, settings.max_memory_mb) == (500, 300)
    with pytest.raises(ValueError, match="must not be negative"):
        Settings.from_env(env, max_jobs=-1)
