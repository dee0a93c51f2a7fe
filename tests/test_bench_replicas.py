"""bench.replicas: both settings measured on a private master and its replica, and their ratio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_it_measures_both_settings_and_their_ratio() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.replicas",
            "--reps",
            "1",
            "--pushes",
            "100",
            "--latency",
            "20",
            "--jobs",
            "500",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in rows[1:]] == [
        "`redis_min_replicas=0`",
        "`redis_min_replicas=1`",
        "1 ÷ 0, per repetition",
    ]
    # Every figure was measured: no dash for a missing one.
    assert all(" - " not in row for row in rows)
