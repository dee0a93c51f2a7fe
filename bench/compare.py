"""``python -m bench.compare REF``: this tree against git REF, every section's own figures.

    python -m bench.compare main --reps 3 -- --sections tracking,flow,feeds,fair --fair-jobs 50000

``python -m bench --ab REF`` interleaves two AsyncTask builds inside one drain section; the other
sections start their workers, brokers and databases themselves. This runs each tree's own bench
in turn instead (REF's exported with ``git archive``), one section at a time, the two runs of a
section back to back and in alternating order (this tree first, then REF first at the next), so
that they are minutes apart at most and a drift of the machine falls on both alike. Then it pairs
each measurement of this tree with REF's of the same configuration and prints this ÷ REF per
repetition and their median.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core import gitref

ROOT = Path(__file__).resolve().parent.parent
THIS = "this tree"
#: A change within this fraction of REF is the machine's noise, not the change's.
TOLERANCE = 0.03
#: Integer fields of a measurement that say which configuration it is (the others measure).
CONFIGURATION_INTS = (
    "processes",
    "concurrency",
    "jobs",
    "keys",
    "waiting",
    "tasks",
    "parallel",
    "threads",
    "items",
)

Entry = dict[str, Any]


@dataclass(frozen=True)
class Figure:
    name: str
    read: Callable[[Entry], float | None]
    #: False where less is better (seconds, CPU per job).
    more_is_better: bool


def _steady_rate(entry: Entry) -> float | None:
    if isinstance(rate := entry.get("steady_rate"), int | float):
        return float(rate)
    steady = entry.get("steady_s")
    return entry["jobs"] / steady if isinstance(steady, int | float) and steady > 0 else None


def _cpu_per_job_us(entry: Entry) -> float | None:
    jobs = entry.get("jobs")
    if not isinstance(jobs, int) or jobs <= 0:
        return None
    steady = entry.get("worker_steady")
    cpu = entry.get("worker_cpu_s", entry.get("cpu_steady_s"))
    if isinstance(steady, dict):
        cpu = steady.get("user", 0.0) + steady.get("system", 0.0)
    return 1e6 * cpu / jobs if isinstance(cpu, int | float) else None


def _field(name: str) -> Callable[[Entry], float | None]:
    def read(entry: Entry) -> float | None:
        value = entry.get(name)
        return float(value) if isinstance(value, int | float) else None

    return read


STEADY = Figure("steady jobs/s", _steady_rate, more_is_better=True)
CPU = Figure("worker CPU µs/job", _cpu_per_job_us, more_is_better=False)
#: Where each section's JSON keeps its measurements, and what is compared of them.
MEASUREMENTS: dict[tuple[str, str], tuple[Figure, ...]] = {
    ("runtime.json", "process"): (STEADY, CPU),
    ("tracking.json", "drain"): (STEADY, CPU),
    ("tracking.json", "create_task"): (Figure("items/s", _field("rate"), more_is_better=True),),
    ("tracking.json", "get_task"): (
        Figure("p50 ms", _field("p50_ms"), more_is_better=False),
        Figure("p99 ms", _field("p99_ms"), more_is_better=False),
    ),
    ("flow.json", "runs"): (STEADY, CPU),
    ("feeds.json", "runs"): (STEADY, CPU),
    ("fair.json", "runs"): (STEADY, CPU),
}


def configuration(entry: Entry) -> str:
    """What names a measurement's setup: its text fields and configuration numbers, by name (two
    builds may write the same fields in another order)."""
    parts = [
        f"{key}={value}"
        for key, value in sorted(entry.items())
        if (isinstance(value, str) and key != "error") or (key in CONFIGURATION_INTS and value is not None)
    ]
    return " ".join(parts)


def figures(out_dir: Path) -> dict[tuple[str, str, str], float]:
    """(measurement list, configuration, figure) -> value, for one run's output folder."""
    found: dict[tuple[str, str, str], float] = {}
    for (file_name, list_name), wanted in MEASUREMENTS.items():
        path = out_dir / file_name
        if not path.exists():
            continue
        for entry in json.loads(path.read_text(encoding="utf-8")).get(list_name, []):
            if entry.get("error"):
                continue
            for figure in wanted:
                value = figure.read(entry)
                if value is not None:
                    found[
                        (f"{file_name.removesuffix('.json')} {list_name}", configuration(entry), figure.name)
                    ] = value
    return found


def split_sections(bench_args: Sequence[str]) -> tuple[list[str], list[str]]:
    """The sections ``--sections`` names, each to run on its own, and the other options."""
    rest = list(bench_args)
    for i, arg in enumerate(rest):
        if arg == "--sections" and i + 1 < len(rest):
            value = rest[i + 1]
            del rest[i : i + 2]
            break
        if arg.startswith("--sections="):
            value = arg.removeprefix("--sections=")
            del rest[i]
            break
    else:
        raise SystemExit("python -m bench.compare: name the sections to compare (-- --sections ...)")
    return [name for name in value.split(",") if name], rest


def run_bench(tree: Path, bench_args: Sequence[str], out_dir: Path) -> None:
    # The tree's own packages ahead of the installed ones, in every process the bench starts.
    env = os.environ | {"PYTHONPATH": str(tree)}
    argv = [sys.executable, "-m", "bench", *bench_args, "--reps", "1", "--out", str(out_dir)]
    print(f"== {tree}: {' '.join(argv[1:])}", file=sys.stderr, flush=True)
    if subprocess.run(argv, cwd=tree, env=env, check=False).returncode != 0:
        raise SystemExit(f"python -m bench.compare: the bench failed in {tree} (output above)")


def ratios(
    this: list[dict[tuple[str, str, str], float]], ref: list[dict[tuple[str, str, str], float]]
) -> dict[tuple[str, str, str], list[float]]:
    """This ÷ REF per repetition, for every figure both trees measured in every repetition."""
    shared = set.intersection(*(set(run) for run in this + ref))
    return {
        key: [a[key] / b[key] for a, b in zip(this, ref, strict=True) if b[key]] for key in sorted(shared)
    }


def unpaired(
    this: list[dict[tuple[str, str, str], float]], ref: list[dict[tuple[str, str, str], float]]
) -> list[tuple[str, str, str]]:
    """The figures some run of either tree measured that ``ratios`` cannot pair in every
    repetition: a configuration one build names otherwise, or a run that failed."""
    seen = [set(run) for run in this + ref]
    return sorted(set().union(*seen) - seen[0].intersection(*seen[1:]))


def table(found: dict[tuple[str, str, str], list[float]], ref_name: str) -> tuple[str, int]:
    """The comparison as Markdown, and how many figures are worse than REF beyond the tolerance."""
    better_is_more = {
        figure.name: figure.more_is_better for group in MEASUREMENTS.values() for figure in group
    }
    lines = [
        f"| measurement | configuration | figure | {THIS} ÷ {ref_name}, per repetition | median | |",
        "|---|---|---|---|---|---|",
    ]
    worse = 0
    for (measurement, config, name), values in found.items():
        median = statistics.median(values)
        loss = (1 - median) if better_is_more[name] else (median - 1)
        flag = "worse" if loss > TOLERANCE else ""
        worse += bool(flag)
        per_rep = ", ".join(f"{v:.3f}" for v in values)
        lines.append(f"| {measurement} | {config} | {name} | {per_rep} | {median:.3f} | {flag} |")
    return "\n".join(lines), worse


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", help="git branch, tag or commit to compare with")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each tree's bench (default 3)")
    parser.add_argument("--out", type=Path, help="keep each run's output here (default: a temporary folder)")
    parser.epilog = "After --: the bench's own options (not --reps or --out), as python -m bench takes them."
    given = list(sys.argv[1:] if argv is None else argv)
    split = given.index("--") if "--" in given else len(given)
    args = parser.parse_args(given[:split])
    sections, bench_args = split_sections(given[split + 1 :])
    if args.reps < 1:
        raise SystemExit("--reps takes 1 or more")
    work = Path(tempfile.mkdtemp(prefix="asynctask-compare-"))
    out = args.out or work / "out"
    try:
        commit = gitref.commit_of(args.ref, parser.prog)
        gitref.export(commit, work / "ref", command=parser.prog)
        trees = {THIS: ROOT, commit: work / "ref"}
        found: dict[str, list[dict[tuple[str, str, str], float]]] = {THIS: [], commit: []}
        turn = 0
        for rep in range(args.reps):
            for name in trees:
                found[name].append({})
            for section in sections:
                order = [THIS, commit] if turn % 2 == 0 else [commit, THIS]
                turn += 1
                for name in order:
                    out_dir = out / ("this" if name == THIS else commit) / str(rep) / section
                    run_bench(trees[name], [*bench_args, "--sections", section], out_dir)
                    found[name][rep] |= figures(out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text, worse = table(ratios(found[THIS], found[commit]), commit)
    print(text)
    for measurement, config, name in unpaired(found[THIS], found[commit]):
        print(f"not compared (missing from some run): {measurement} | {config} | {name}")
    print(f"\n{worse} figure(s) worse than {commit} by more than {TOLERANCE:.0%} (median of {args.reps}).")
    return 1 if worse else 0


if __name__ == "__main__":
    raise SystemExit(main())
