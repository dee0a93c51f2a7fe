"""Where a worker's job threads run (asynctask.worker.placement): on one CPU each process, spread
over the host's CPUs, while its jobs are short; on every CPU while they are long or when
pinning is off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from asynctask import Client, Settings
from asynctask.middleware import Chain
from asynctask.worker.placement import (
    CpuRegistry,
    CpuTimes,
    Placement,
    freer_cpu,
    read_cpu_times,
)
from tests.brokers.conftest import read_runs, worker_env
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "tests" / "jobs" / "placement_jobs.py"
CONCURRENCY = 4
several_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")


def times(**cpus: tuple[float, float]) -> dict[int, CpuTimes]:
    return {int(name[3:]): CpuTimes(busy, idle) for name, (busy, idle) in cpus.items()}


def test_job_threads_leave_a_cpu_that_other_work_takes_for_an_idle_one() -> None:
    before = times(cpu0=(0, 0), cpu1=(0, 0))
    # Over 10 s: the process used 5 s of CPU 0, other work 4 s more; CPU 1 idle 9 s.
    after = times(cpu0=(9, 1), cpu1=(1, 9))
    assert freer_cpu(0, 10, 5, before, after) == 1


def test_job_threads_leave_a_cpu_that_other_work_takes_whole() -> None:
    before = times(cpu0=(0, 0), cpu1=(0, 0))
    after = times(cpu0=(10, 0), cpu1=(0, 10))
    assert freer_cpu(0, 10, 0, before, after) == 1


def test_job_threads_stay_on_a_cpu_they_use_themselves() -> None:
    before = times(cpu0=(0, 0), cpu1=(0, 0))
    after = times(cpu0=(10, 0), cpu1=(1, 9))
    assert freer_cpu(0, 10, 9, before, after) is None


def test_job_threads_stay_when_no_cpu_is_freer() -> None:
    before = times(cpu0=(0, 0), cpu1=(0, 0), cpu2=(0, 0))
    after = times(cpu0=(10, 0), cpu1=(8, 2), cpu2=(9, 1))
    assert freer_cpu(0, 10, 4, before, after) is None


def test_cpu_times_are_read_per_cpu_in_seconds(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    ticks = os.sysconf("SC_CLK_TCK")
    stat.write_text(
        f"cpu  {3 * ticks} 0 0 {5 * ticks} 0 0 0 0 0 0\n"
        f"cpu0 {ticks} 0 {ticks} {2 * ticks} {ticks} 0 0 0 0 0\n"
        f"cpu1 0 0 0 {2 * ticks} 0 0 {ticks} 0 0 0\n"
        "intr 1 2 3\n"
    )
    assert read_cpu_times(str(stat)) == {0: CpuTimes(2.0, 3.0), 1: CpuTimes(1.0, 2.0)}


def test_a_process_takes_the_cpu_the_fewest_others_hold(tmp_path: Path) -> None:
    registry = CpuRegistry(str(tmp_path / "cpus"))
    (tmp_path / "cpus").write_text(f'{{"{os.getpid()}": 0}}')
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert registry.hold(os.getppid(), frozenset({0, 1})) == 1
        # A process placed again leaves its old place.
        assert registry.hold(os.getppid(), frozenset({0, 1})) == 1
        assert registry.hold(sleeper.pid, frozenset({0, 1})) == 0
        # A move: to the one CPU given, however many hold it.
        assert registry.hold(sleeper.pid, frozenset({1})) == 1
        assert registry.hold(os.getpid() + 10**7, frozenset({0, 1})) == 0
    finally:
        sleeper.kill()
        sleeper.wait()


def test_processes_gone_hold_no_cpu(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / "cpus").write_text(f'{{"{gone.pid}": 0}}')
    assert CpuRegistry(str(tmp_path / "cpus")).hold(os.getpid(), frozenset({0, 1})) == 0


def test_a_registry_written_over_counts_as_empty(tmp_path: Path) -> None:
    (tmp_path / "cpus").write_text("[not json")
    assert CpuRegistry(str(tmp_path / "cpus")).hold(os.getpid(), frozenset({0, 1})) == 0


def test_a_registry_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("someone's file")
    (tmp_path / "cpus").symlink_to(elsewhere)
    with pytest.raises(OSError):
        CpuRegistry(str(tmp_path / "cpus")).hold(os.getpid(), frozenset({0, 1}))
    assert elsewhere.read_text() == "someone's file"


def test_nothing_is_held_when_pinning_is_off(tmp_path: Path) -> None:
    placement = Placement(False, CpuRegistry(str(tmp_path / "cpus")))
    placement.enroll(threading.get_native_id())
    placement.for_jobs(True)
    assert placement.cpu is None
    assert os.sched_getaffinity(0) == placement.allowed
    assert not (tmp_path / "cpus").exists()


@several_cpus
def test_a_job_thread_that_starts_runs_where_the_others_do(tmp_path: Path) -> None:
    """Not where the thread that started it ran: a replacement for a job thread that died is
    started by that thread, which may have been held elsewhere or freed since."""
    placement = Placement(True, CpuRegistry(str(tmp_path / "cpus")))
    seen: dict[str, set[int]] = {}

    def job_thread(name: str) -> None:
        placement.enroll(threading.get_native_id())
        if name == "first":
            placement.for_jobs(True)
        seen[name] = os.sched_getaffinity(0)
        placement.leave(threading.get_native_id())

    for name in ("first", "second"):
        thread = threading.Thread(target=job_thread, args=(name,))
        thread.start()
        thread.join()
    assert seen["first"] == seen["second"] == {placement.cpu}


Spawn = Callable[..., "subprocess.Popen[bytes]"]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Start ``asynctask worker -r tests/jobs/placement_jobs.py -c 4 ARGS...`` with a CPU registry
    of the test's own (its temporary directory)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(settings: Settings, *args: str) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "asynctask", "worker", "-r", str(JOBS), "-c", str(CONCURRENCY)]
        command += args
        env = worker_env(settings, ASYNCTASK_TEST_RUNS=str(tmp_path / "runs.txt"), TMPDIR=str(tmp_path))
        with open(tmp_path / f"worker-{len(procs)}.log", "wb") as log:
            proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def thread_cpus(pid: int) -> dict[int, frozenset[int]]:
    """The CPUs each thread of process ``pid`` may run on, by thread id."""
    cpus = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        cpus[int(tid)] = frozenset(os.sched_getaffinity(int(tid)))
    return cpus


def held_cpus(pid: int) -> list[int]:
    """The CPU of each thread of ``pid`` held to exactly one."""
    return sorted(next(iter(cpus)) for cpus in thread_cpus(pid).values() if len(cpus) == 1)


def run_jobs(settings: Settings, tmp_path: Path, count: int, *args: object, name: str = "record") -> None:
    client = Client(settings, middleware=Chain())
    try:
        already = len(read_runs(tmp_path / "runs.txt")) if (tmp_path / "runs.txt").exists() else 0
        client.push_bulk({"class": name, "args": [list(args)] * count})
    finally:
        client.broker.close()
    runs = tmp_path / "runs.txt"
    wait_until(lambda: len([r for r in read_runs(runs) if r.event == "done"]) >= already + count, timeout=60)


def drain_held(settings: Settings, tmp_path: Path, pid: int) -> list[int]:
    """Drain no-op jobs until the job threads of worker ``pid`` are held; their CPUs. A job that
    comes to a thread waiting on the empty queue frees them: the pushes of a bulk come in
    parts, and the worker may catch up with them."""
    for _ in range(5):
        run_jobs(settings, tmp_path, 3000, 0)
        if len(held_cpus(pid)) == CONCURRENCY:
            break
    return held_cpus(pid)


@several_cpus
def test_the_job_threads_of_a_worker_running_short_jobs_share_one_cpu(
    redis_process_settings: Settings, spawn: Spawn, tmp_path: Path
) -> None:
    worker = spawn(redis_process_settings)
    held = drain_held(redis_process_settings, tmp_path, worker.pid)
    assert len(held) == CONCURRENCY and len(set(held)) == 1
    # The main thread is not one of them.
    assert len(thread_cpus(worker.pid)[worker.pid]) > 1


@several_cpus
def test_the_threads_that_run_async_jobs_are_not_held(
    redis_process_settings: Settings, spawn: Spawn, tmp_path: Path
) -> None:
    """The event loop's threads start from the job thread that fetched the first async job,
    here among no-op jobs that hold the job threads."""
    worker = spawn(redis_process_settings)
    client = Client(redis_process_settings, middleware=Chain())
    try:
        client.push_bulk({"class": "record", "args": [[0]] * 3000})
        client.push({"class": "record_async", "args": []})
        client.push_bulk({"class": "record", "args": [[0]] * 3000})
    finally:
        client.broker.close()
    runs = tmp_path / "runs.txt"
    wait_until(lambda: runs.exists() and len(read_runs(runs)) == 6001, timeout=60)
    assert len(thread_cpus(worker.pid)) >= CONCURRENCY + 3
    assert len(drain_held(redis_process_settings, tmp_path, worker.pid)) == CONCURRENCY


@several_cpus
def test_two_workers_hold_different_cpus(
    redis_process_settings: Settings, spawn: Spawn, tmp_path: Path
) -> None:
    workers = [spawn(redis_process_settings), spawn(redis_process_settings)]
    for _ in range(5):
        run_jobs(redis_process_settings, tmp_path, 6000, 0)
        if all(len(held_cpus(w.pid)) == CONCURRENCY for w in workers):
            break
    assert len({held_cpus(w.pid)[0] for w in workers}) == 2


@several_cpus
def test_long_jobs_run_on_every_cpu(redis_process_settings: Settings, spawn: Spawn, tmp_path: Path) -> None:
    worker = spawn(redis_process_settings)
    assert len(drain_held(redis_process_settings, tmp_path, worker.pid)) == CONCURRENCY
    run_jobs(redis_process_settings, tmp_path, 40, 40)
    assert held_cpus(worker.pid) == []


@several_cpus
def test_jobs_that_come_one_at_a_time_run_on_every_cpu(
    redis_process_settings: Settings, spawn: Spawn, tmp_path: Path
) -> None:
    worker = spawn(redis_process_settings)
    assert len(drain_held(redis_process_settings, tmp_path, worker.pid)) == CONCURRENCY
    for _ in range(3):
        run_jobs(redis_process_settings, tmp_path, 1, 0)
    assert held_cpus(worker.pid) == []


@several_cpus
def test_no_cpu_pinning_holds_no_thread(
    redis_process_settings: Settings, spawn: Spawn, tmp_path: Path
) -> None:
    worker = spawn(redis_process_settings, "--no-cpu-pinning")
    assert drain_held(redis_process_settings, tmp_path, worker.pid) == []


@several_cpus
@pytest.mark.alone
def test_job_threads_move_off_a_cpu_that_other_work_takes(
    redis_process_settings: Settings, spawn: Spawn, tmp_path: Path
) -> None:
    worker = spawn(redis_process_settings, "-v")
    [cpu] = set(drain_held(redis_process_settings, tmp_path, worker.pid))
    hog = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
    try:
        # The heartbeat (every 0.5 s) looks at the CPUs while no job comes (pushing them would
        # keep the other CPU busy); the threads move at their next job.
        time.sleep(2)
        log = tmp_path / "worker-0.log"
        moved = "job threads moved to another CPU"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and moved not in log.read_text():
            run_jobs(redis_process_settings, tmp_path, 100, 0)
        assert moved in log.read_text()
        # Jobs that come one at a time free the threads: only a batch shows where they are held.
        held = drain_held(redis_process_settings, tmp_path, worker.pid)
        assert len(held) == CONCURRENCY and cpu not in held
    finally:
        hog.kill()
        hog.wait()
