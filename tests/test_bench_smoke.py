"""The bench runs, end to end: every section at its smallest size (``python -m bench --quick``),
its workers, peers and private servers started and stopped, its report written.

It runs beside other tests: a smoke run checks that the bench works, not what it measures.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.core.cli import SECTIONS
from bench.core.system import ROOT


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_every_section_of_the_bench_runs_and_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1100,
    )
    # A section that raised makes the run fail, and says why on stderr.
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(path.stem for path in out.glob("*.json")) == sorted(SECTIONS)
    assert (out / "RESULTS.md").stat().st_size > 0
