"""bench.compare's pairing: this tree's measurement ÷ REF's of the same configuration, per
repetition, and a median worse than REF beyond the tolerance marked whichever way is better."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import compare


def out_dir(tmp_path: Path, name: str, rate: float, cpu_s: float, p99_ms: float) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    fair = {
        "runs": [
            {
                "rep": 0,
                "case": "fifo-1",
                "backend": "redis",
                "jobs": 1000,
                "steady_s": 1000 / rate,
                "worker_cpu_s": cpu_s,
                "error": "",
            },
            {
                "rep": 0,
                "case": "fifo-1",
                "backend": "postgresql",
                "jobs": 1000,
                "steady_s": 0.0,
                "worker_cpu_s": cpu_s,
                "error": "the drain stalled",
            },
        ]
    }
    tracking: dict[str, Any] = {"get_task": [{"threads": 8, "p50_ms": 1.0, "p99_ms": p99_ms}]}
    (folder / "fair.json").write_text(json.dumps(fair))
    (folder / "tracking.json").write_text(json.dumps(tracking))
    return folder


def test_ratios_pair_the_same_configuration_per_repetition(tmp_path: Path) -> None:
    this = [compare.figures(out_dir(tmp_path, f"this{i}", 1000.0 * (i + 1), 0.1, 5.0)) for i in range(2)]
    ref = [compare.figures(out_dir(tmp_path, f"ref{i}", 500.0, 0.2, 5.0)) for i in range(2)]
    found = compare.ratios(this, ref)
    redis = ("fair runs", "backend=redis case=fifo-1 jobs=1000", "steady jobs/s")
    assert found[redis] == [2.0, 4.0]
    assert found[(*redis[:2], "worker CPU µs/job")] == [0.5, 0.5]
    # A failed drain is no measurement: its configuration is left out, not compared as 0.
    assert not [key for key in found if "postgresql" in key[1]]


def test_a_configuration_pairs_whatever_order_each_build_writes_its_fields(tmp_path: Path) -> None:
    this = [compare.figures(out_dir(tmp_path, "this", 1000.0, 0.1, 5.0))]
    reordered = out_dir(tmp_path, "ref", 500.0, 0.1, 5.0)
    runs = json.loads((reordered / "fair.json").read_text())["runs"]
    (reordered / "fair.json").write_text(json.dumps({"runs": [dict(reversed(run.items())) for run in runs]}))
    ref = [compare.figures(reordered)]
    assert compare.ratios(this, ref)[
        ("fair runs", "backend=redis case=fifo-1 jobs=1000", "steady jobs/s")
    ] == [2.0]
    assert compare.unpaired(this, ref) == []


def test_a_figure_one_run_lacks_is_named_as_not_compared(tmp_path: Path) -> None:
    this = [compare.figures(out_dir(tmp_path, f"this{i}", 1000.0, 0.1, 5.0)) for i in range(2)]
    ref = [compare.figures(out_dir(tmp_path, f"ref{i}", 500.0, 0.2, 5.0)) for i in range(2)]
    (tmp_path / "ref1" / "tracking.json").unlink()
    ref[1] = compare.figures(tmp_path / "ref1")
    assert compare.unpaired(this, ref) == [
        ("tracking get_task", "threads=8", "p50 ms"),
        ("tracking get_task", "threads=8", "p99 ms"),
    ]
    assert not [key for key in compare.ratios(this, ref) if key[0] == "tracking get_task"]


def test_a_median_worse_beyond_the_tolerance_is_marked_in_its_own_direction(tmp_path: Path) -> None:
    this = [compare.figures(out_dir(tmp_path, "this", 960.0, 0.1, 5.2))]
    ref = [compare.figures(out_dir(tmp_path, "ref", 1000.0, 0.11, 5.0))]
    text, worse = compare.table(compare.ratios(this, ref), "abc1234")
    rows = {line.split(" | ")[2]: line for line in text.splitlines()[2:]}
    # 4% fewer jobs/s and 4% more p99 are worse; 9% less CPU per job is better.
    assert rows["steady jobs/s"].endswith("| worse |")
    assert rows["p99 ms"].endswith("| worse |")
    assert rows["worker CPU µs/job"].endswith("|  |")
    assert rows["p50 ms"].endswith("|  |")
    assert worse == 2


def test_each_section_runs_on_its_own_with_the_other_options() -> None:
    sections, rest = compare.split_sections(["--jobs", "100", "--sections", "tracking,fair", "--reps", "2"])
    assert (sections, rest) == (["tracking", "fair"], ["--jobs", "100", "--reps", "2"])
    assert compare.split_sections(["--sections=flow"]) == (["flow"], [])
    with pytest.raises(SystemExit, match="name the sections"):
        compare.split_sections(["--jobs", "100"])
