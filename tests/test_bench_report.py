"""The bench's report arithmetic: ratios per repetition, the fastest Python peer (never Sidekiq or
BullMQ), section order, the fair share section's pairs and order of drains, the periodic section's
pairs and checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bench.core import document
from bench.core.drain import REDIS
from bench.core.system import ROOT
from bench.fair import report as fair_report
from bench.fair.create import sizes
from bench.fair.section import FairResults, FairRun, case_name, order
from bench.periodic import report as periodic_report
from bench.periodic.jobs import NAME_PREFIX
from bench.periodic.section import BASELINE, SCHEDULED, PeriodicResults, PeriodicRun, check
from bench.periodic.section import order as periodic_order
from bench.runtime import asynctask_system, report
from bench.runtime.runner import EnqueueRun, ProcessRun


def drain(system: str, rate: float, cpu_per_job: float = 1e-4, processes: int = 1) -> ProcessRun:
    run = ProcessRun(system, 10, 1000, EnqueueRun(system, "bulk", 1000, 0.01, 0), processes=processes)
    run.steady_s = 1000 / rate
    run.worker_steady.user = cpu_per_job * 1000
    return run


def results(*reps: list[ProcessRun]) -> report.Results:
    found = report.Results({"jobs": 1000, "reps": len(reps), "single_jobs": 0, "nproc": 2}, {})
    found.process = [(rep, run) for rep, runs in enumerate(reps) for run in runs]
    return found


def test_ratios_pair_runs_of_the_same_repetition() -> None:
    found = results(
        [drain("AsyncTask", 9000), drain("Sidekiq", 3000)],
        [drain("AsyncTask", 4000), drain("Sidekiq", 2000)],
    )
    # Per repetition 3.0 and 2.0: not the ratio of the medians (6500 / 2500 = 2.6).
    assert report.paired(found, (1, 10), "Sidekiq", lambda r: r.steady_rate) == [3.0, 2.0]


def test_the_fastest_python_peer_is_chosen_per_repetition_and_kept_for_every_metric() -> None:
    found = results(
        [drain("AsyncTask", 6000), drain("Sidekiq", 9000), drain("Celery", 1000, 1e-3), drain("Huey", 3000)],
        [drain("AsyncTask", 6000), drain("Celery", 4000, 1e-3), drain("Huey", 2000, 5e-5)],
    )
    fastest = report.FASTEST_PYTHON
    # Sidekiq is no Python peer: Huey is fastest in the first repetition, Celery in the second.
    assert report.paired(found, (1, 10), fastest, lambda r: r.steady_rate) == [2.0, 1.5]
    # CPU per job compares with that same peer, not with the peer of the lowest CPU.
    cpu = report.paired(found, (1, 10), fastest, lambda r: r.worker_steady.cpu / r.jobs)
    assert [round(value, 6) for value in cpu] == [1.0, 0.1]


def test_bullmq_is_compared_on_its_own_and_is_no_python_peer() -> None:
    found = results(
        [drain("AsyncTask", 6000), drain("BullMQ", 5000), drain("Huey", 3000)],
        [drain("AsyncTask", 6000), drain("BullMQ", 4000), drain("Huey", 2000)],
    )
    assert report.paired(found, (1, 10), "BullMQ", lambda r: r.steady_rate) == [1.2, 1.5]
    # Faster than every Python peer, it is still not the one AsyncTask is held against.
    assert report.paired(found, (1, 10), report.FASTEST_PYTHON, lambda r: r.steady_rate) == [2.0, 3.0]


def test_configurations_are_told_apart_by_process_count() -> None:
    found = results(
        [drain("AsyncTask", 8000), drain("Huey", 4000), drain("AsyncTask", 9000, processes=2)],
    )
    assert found.configurations() == [(1, 10), (2, 10)]
    assert report.paired(found, (2, 10), "Huey", lambda r: r.steady_rate) == []
    table = report.scaling_table(found)
    assert "| AsyncTask | 10 | 8 000 | 9 000 | 1.12x |" in table
    assert "| Huey | 10 | 4 000 | - | - |" in table


def test_the_ab_reference_is_compared_per_repetition_and_is_no_python_peer() -> None:
    reference = "AsyncTask @ 4518557e01"
    found = results(
        [drain("AsyncTask", 9000, 2e-5), drain(reference, 6000, 4e-5), drain("Huey", 4500)],
        [drain(reference, 5000, 4e-5), drain("AsyncTask", 10000, 1e-5), drain("Huey", 4000)],
    )
    # AsyncTask at an older commit is not the fastest Python peer, even when it is faster.
    assert report.paired(found, (1, 10), report.FASTEST_PYTHON, lambda r: r.steady_rate) == [2.0, 2.5]
    ab = report.ab_table(found)
    assert ab[0].startswith(f"| AsyncTask ÷ {reference} | steady jobs/s |")
    # Steady 1.5x and 2.0x, CPU per job 0.5x and 0.25x: medians of the per-repetition ratios.
    assert ab[2].startswith("| 1 proc x 10 | 1.75x (1.50x-2.00x) | ")
    assert "| 0.38x (0.25x-0.50x) |" in ab[2]
    assert not any(reference in line for line in report.ratio_table(found))


def test_an_ab_reference_is_the_package_of_that_commit_run_from_its_own_directory(tmp_path: Path) -> None:
    reference = asynctask_system.at_ref("HEAD", tmp_path)
    commit = reference.name.removeprefix(asynctask_system.AT_REF_PREFIX)
    assert (reference.cwd / "asynctask" / "__init__.py").is_file()
    assert reference.cwd == tmp_path / f"asynctask-{commit}"
    env = reference.env("redis://127.0.0.1:1/0", None)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(reference.cwd)
    argv = reference.worker_argv(10)
    assert argv[argv.index("-r") + 1] == str(ROOT / "bench" / "core" / "noop_jobs.py")
    with pytest.raises(SystemExit, match="--ab: git rev-parse failed"):
        asynctask_system.at_ref("no-such-ref-anywhere", tmp_path)


def test_a_first_section_goes_right_after_the_machine_list() -> None:
    original = (
        "# Title\n\nRaw data: `a.json` beside this file.\n\n"
        "## Machine and versions\n\n- x: 1\n\n## Other\n\ntext\n"
    )
    updated = document.with_section(original, "Targets", "## Targets\n\nmet\n", first=True)
    assert updated.index("## Machine") < updated.index("## Targets") < updated.index("## Other")
    assert "Raw data: `a.json` beside this file." in updated
    again = document.with_section(updated, "Targets", "## Targets\n\nmissed\n", first=True)
    assert again.count("## Targets") == 1 and "missed" in again


def fair_drain(mode: str, tasks: int, rate: float) -> FairRun:
    run = FairRun(mode, REDIS, tasks, 2, 10, 1000)
    run.steady_s = 1000 / rate
    return run


def fair_results(*reps: list[FairRun], quick: bool = False) -> FairResults:
    found = FairResults({"jobs": 1000, "tasks": 100, "reps": len(reps), "quick": quick})
    found.runs = [(rep, run) for rep, runs in enumerate(reps) for run in runs]
    return found


def test_fair_share_ratios_pair_the_drains_of_a_repetition_and_judge_the_median() -> None:
    reps = (
        [fair_drain("fifo", 1, 10_000), fair_drain("fair", 1, 9_500), fair_drain("fifo", 100, 8_000)],
        [fair_drain("fifo", 1, 5_000), fair_drain("fair", 1, 4_000), fair_drain("fair", 100, 8_000)],
    )
    found = fair_results(*reps)
    # Per repetition 0.95 and 0.80, not the ratio of the medians (6750 / 7500 = 0.90): the
    # median 0.875 misses the 0.90 floor. No repetition has both 100-task drains: no row.
    assert fair_report.paired(found, REDIS, 1) == [0.95, 0.8]
    assert fair_report.paired(found, REDIS, 100) == []
    rows = fair_report.target_rows(found)
    assert len(rows) == 1
    assert "Redis: drain jobs/s, fair ÷ fifo queue, one task" in rows[0] and "**missed**" in rows[0]
    assert "not judged (--quick)" in fair_report.target_rows(fair_results(*reps, quick=True))[0]
    table = "\n".join(fair_report.throughput_table(found))
    assert "| Redis | fair-100 | 100, a tenant each | 1,000 | 2 x 10 |" in table


def test_fair_share_tasks_split_the_jobs_and_the_order_reverses_every_other_repetition() -> None:
    assert sizes(1000, 100) == [10] * 100
    assert sizes(1003, 100)[:4] == [11, 11, 11, 10] and sum(sizes(1003, 100)) == 1003
    first = [case_name(mode, tasks) for mode, tasks in order(100, 0)]
    assert first == ["fifo-1", "fair-1", "fifo-100", "fair-100"]
    assert order(100, 1) == order(100, 0)[::-1] and order(100, 2) == order(100, 0)


def periodic_run(case: str, cpu_s: list[float], p99_ms: float = 0.0) -> PeriodicRun:
    run = PeriodicRun(REDIS, case, 1000 if case == SCHEDULED else 0, 2, 10, 10)
    run.worker_cpu_s = cpu_s
    run.visible_lag.p99 = p99_ms
    return run


def periodic_results(*reps: list[PeriodicRun], quick: bool = False) -> PeriodicResults:
    found = PeriodicResults({"schedules": 1000, "reps": len(reps), "quick": quick, "backends": [REDIS]})
    found.runs = [(rep, run) for rep, runs in enumerate(reps) for run in runs]
    return found


def test_periodic_scheduling_cpu_pairs_the_runs_of_a_repetition_and_judges_the_median() -> None:
    reps = (
        [periodic_run(BASELINE, [0.1, 0.1]), periodic_run(SCHEDULED, [0.4, 0.6], p99_ms=40)],
        [periodic_run(BASELINE, [0.2, 0.2]), periodic_run(SCHEDULED, [0.8, 1.0], p99_ms=300)],
        [periodic_run(SCHEDULED, [0.5, 0.5], p99_ms=50)],
    )
    found = periodic_results(*reps)
    # CPU seconds over a 10 s window, per process: 5% - 1% and 9% - 2% of a core; the third
    # repetition has no baseline to pair with.
    assert [round(pct, 6) for pct in periodic_report.scheduling_cpu(found, REDIS)] == [4.0, 7.0]
    rows = periodic_report.target_rows(found)
    assert len(rows) == 2
    assert "scheduling CPU" in rows[0] and "5.5 (4.0-7.0) %" in rows[0] and "**missed**" in rows[0]
    assert "in the queue - tick" in rows[1] and "50 (40-300) ms" in rows[1] and "**met**" in rows[1]
    assert all(
        "not judged (--quick)" in row
        for row in periodic_report.target_rows(periodic_results(*reps, quick=True))
    )
    assert periodic_order(1) == periodic_order(0)[::-1] and periodic_order(0, baseline=False) == [SCHEDULED]


def test_periodic_check_counts_each_tick_once_and_times_jobs_by_the_first_sample_holding_them() -> None:
    run = PeriodicRun(REDIS, SCHEDULED, 2, 2, 10, 2)
    run.window_start = 100

    def job(name: int, tick: int, enqueued_at: float) -> dict[str, Any]:
        return {"periodic": f"{NAME_PREFIX}{name}", "periodic_at": tick, "enqueued_at": enqueued_at}

    # In push order: tick 100 is before the window; tick 101 of schedule 0 is pushed twice and
    # schedule 1's tick 102 never.
    jobs = [job(0, 100, 100.0), job(1, 100, 100.0), job(0, 101, 101.01), job(1, 101, 101.01)]
    jobs += [job(0, 101, 101.02), job(0, 102, 102.03)]
    samples = [(100.6, 2), (101.05, 5), (102.5, 6)]
    check(run, list(enumerate(jobs, start=1)), samples)
    assert run.checks == {"expected": 4, "missing": 1, "doubled": 1, "unknown": 0, "unseen": 0}
    assert run.jobs == 4 and run.pushes == 3
    assert round(run.enqueued_lag.max) == 30 and round(run.visible_lag.max) == 500
    assert "missing 1, doubled 1" in run.error
