"""bench.held: drains with and without tasks held waiting for a parent, on both brokers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_it_drains_each_store_and_reports_both_brokers() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.held", "--reps", "1", "--held", "20", "--jobs", "300"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [cells[0].strip() for cells in rows[1:]] == ["redis", "postgresql"]
    # Every drain ran all its jobs (drain_once checks the marker and the queue): each has a rate.
    assert all(cell.strip()[0].isdigit() for cells in rows[1:] for cell in cells[1:3])
