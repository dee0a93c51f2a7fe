"""bench.callbacks: a task drained with and without its on_complete job, and their ratio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_it_drains_with_and_without_the_callback_and_gives_their_ratio() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.callbacks", "--reps", "1", "--jobs", "300"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert "with on_complete: " in done.stdout and "callback ran " in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in rows[1:]] == [
        "jobs/s until SQL showed the end (median, range)",
        "jobs/s while the jobs ran",
        "callback ran after the end showed (ms)",
    ]
    # Every figure was measured: no dash for a missing one.
    assert all(" - " not in row for row in rows)
