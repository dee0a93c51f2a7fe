"""bench.parents: tasks created plain and waiting, and a parent's end releasing every child."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_it_times_a_parents_end_and_every_child_is_released() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.parents", "--reps", "1", "--children", "40"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [cells[0].strip() for cells in rows[1:]] == ["redis", "postgresql"]
    # Every child released by its parent's end, on both brokers.
    assert [cells[-1].strip() for cells in rows[1:]] == ["40", "40"]
