"""The bench's report arithmetic: ratios per repetition, the fastest Python peer, section order,
the fair share section's pairs and order of drains."""

from __future__ import annotations

from bench.core import document
from bench.core.drain import REDIS
from bench.fair import report as fair_report
from bench.fair.create import sizes
from bench.fair.section import FairResults, FairRun, case_name, order
from bench.runtime import report
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


def test_configurations_are_told_apart_by_process_count() -> None:
    found = results(
        [drain("AsyncTask", 8000), drain("Huey", 4000), drain("AsyncTask", 9000, processes=2)],
    )
    assert found.configurations() == [(1, 10), (2, 10)]
    assert report.paired(found, (2, 10), "Huey", lambda r: r.steady_rate) == []
    table = report.scaling_table(found)
    assert "| AsyncTask | 10 | 8 000 | 9 000 | 1.12x |" in table
    assert "| Huey | 10 | 4 000 | - | - |" in table


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
