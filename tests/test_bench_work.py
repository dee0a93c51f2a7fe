"""bench.work's counts: what each job adds between two drain sizes, a count above REF's in every
drain beyond the tolerance marked, and the call counter the worker processes load at start-up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.work import __main__ as work
from bench.work.scenarios import COUNTING


def test_per_job_is_the_larger_drains_excess_over_the_extra_jobs() -> None:
    small = {"plain": {"python calls": 1_000.0 + 2_000 * 60, "redis commands": 50.0 + 2_000 * 3}}
    large = {
        "plain": {"python calls": 1_000.0 + 6_000 * 60, "redis commands": 50.0 + 6_000 * 3},
        "task": {"python calls": 9.0},
    }

    found = work.per_job(small, large, 4_000)

    assert found == {("plain", "python calls"): 60.0, ("plain", "redis commands"): 3.0}


def test_a_count_above_refs_in_every_drain_beyond_the_tolerance_is_marked() -> None:
    ref = {
        ("plain", "python calls"): [100.0, 101.0],
        ("task", "python calls"): [100.0, 110.0],
        ("fed", "python calls"): [100.0, 100.0],
        ("task", "sql"): [0.0, 0.0],
    }
    this = {
        ("plain", "python calls"): [104.1, 105.0],
        ("task", "python calls"): [112.0, 108.0],
        ("fed", "python calls"): [103.1, 90.0],
        ("task", "sql"): [1.0, 1.0],
    }

    text, worse = work.table(this, ref, "abc123")

    assert worse == 1
    rows = {tuple(line.split(" | ")[:2]): line for line in text.splitlines()[2:]}
    assert rows[("| plain", "python calls")].endswith("| more |")
    # Above REF's median, but inside the range of REF's own drains, or not in every drain.
    assert "more" not in rows[("| task", "python calls")]
    assert "more" not in rows[("| fed", "python calls")]
    assert rows[("| task", "sql")].endswith("| - | |")


def count_calls(tmp_path: Path, calls: int) -> int:
    prefix = tmp_path / f"calls{calls}"
    code = f"def f():\n    pass\nfor _ in range({calls}):\n    f()\n"
    env = os.environ | {"PYTHONPATH": str(COUNTING), "BENCH_CALLS": str(prefix)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    (written,) = tmp_path.glob(f"{prefix.name}-*")
    return int(written.read_text())


def test_the_counter_counts_each_python_call_of_the_process(tmp_path: Path) -> None:
    assert count_calls(tmp_path, 1_000) - count_calls(tmp_path, 10) == 990
