"""``python -m bench.work REF``: this package's docstring says what it counts; ``--help`` gives the
options."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import bench.work
from bench.core import fmt, gitref
from bench.core.postgres import DEFAULT_PG_URL, postgres_unreachable
from bench.core.redis_server import RedisServer
from bench.core.system import ROOT, clean_env
from bench.sql.db import PostgresDatabase

THIS = "this tree"
#: A count this much above REF's in every drain is a cost the change added.
TOLERANCE = 0.03
BACKENDS = ("redis", "postgresql")

#: counter -> its total over one scenario's drain
Totals = dict[str, float]
#: scenario -> its totals
Run = dict[str, Totals]


def per_job(small: Run, large: Run, extra_jobs: int) -> dict[tuple[str, str], float]:
    """(scenario, counter) -> what each job adds: the larger drain's count beyond the smaller's,
    over the jobs it had more. What a worker costs once (imports, start, stop) cancels out."""
    return {
        (scenario, counter): (large[scenario][counter] - small[scenario][counter]) / extra_jobs
        for scenario in large
        for counter in large[scenario]
        if scenario in small and counter in small[scenario]
    }


def table(
    this: dict[tuple[str, str], list[float]], ref: dict[tuple[str, str], list[float]], ref_name: str
) -> tuple[str, int]:
    """The comparison as Markdown (each side's median, and its range over the repetitions), and
    how many counts are more in every drain of this tree than in any of REF's by more than the
    tolerance: where claims take batches whose size follows timing (a tracked task's jobs on
    Redis), one build's drains differ by several percent, and a range tells that from a change."""
    two = fmt.fixed(2)
    rows = []
    worse = 0
    for key in sorted(set(this) & set(ref)):
        mine, theirs = this[key], ref[key]
        middle = statistics.median(theirs)
        ratio = statistics.median(mine) / middle if middle else None
        flag = "more" if max(theirs) > 0 and min(mine) > max(theirs) * (1 + TOLERANCE) else ""
        worse += bool(flag)
        shown = "-" if ratio is None else f"{ratio:.3f}"
        rows.append([*key, fmt.spread(theirs, two), fmt.spread(mine, two), shown, flag])
    header = ["scenario", "per job", ref_name, THIS, f"{THIS} ÷ {ref_name}, medians", ""]
    return "\n".join(fmt.table(header, rows)), worse


def export_ref(commit: str, into: Path, command: str) -> None:
    """REF's package, with its migrations where the installed package keeps them."""
    gitref.export(commit, into, "asynctask", "migrations", command=command)
    (into / "migrations").rename(into / "asynctask" / "_migrations")


def drain_all(
    tree: Path, backend: str, jobs: int, args: argparse.Namespace, server: RedisServer, workdir: Path
) -> Run:
    """Every scenario of ``bench/work/scenarios.py`` drained once with ``tree``'s ``asynctask``."""
    workdir.mkdir(parents=True)
    out = workdir / "totals.json"
    argv = [sys.executable, "-m", "bench.work.scenarios", "--backend", backend, "--jobs", str(jobs)]
    argv += ["--concurrency", str(args.concurrency), "--workdir", str(workdir), "--out", str(out)]
    env = clean_env(PYTHONPATH=os.pathsep.join([str(tree), str(ROOT)]))
    print(f"== {tree}: {backend}, {jobs:,} jobs a scenario", file=sys.stderr, flush=True)
    if backend == "redis":
        with server.client() as conn:
            conn.flushall()
        argv += ["--redis-url", server.url, "--database-url", f"sqlite:///{workdir / 'tracking.db'}"]
        _run(argv, env, workdir)
    else:
        with PostgresDatabase(args.pg_url, "work") as database:
            argv += ["--database-url", database.url]
            _run(argv, env, workdir)
    run: Run = json.loads(out.read_text(encoding="utf-8"))
    return run


def _run(argv: list[str], env: dict[str, str], workdir: Path) -> None:
    if subprocess.run(argv, env=env, cwd=workdir, check=False).returncode != 0:
        raise SystemExit(f"python -m bench.work: the scenarios failed (worker log: {workdir / 'worker.log'})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.work", description=bench.work.__doc__)
    parser.add_argument("ref", help="git branch, tag or commit to compare with")
    parser.add_argument(
        "--jobs",
        default="2000,6000",
        help="the two drain sizes whose difference is counted (default 2000,6000)",
    )
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="redis, postgresql or both (default both)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=1, help="the worker's threads (default 1: one claim a job)"
    )
    parser.add_argument("--reps", type=int, default=3, help="drains of each size (default 3)")
    parser.add_argument(
        "--pg-url", default=DEFAULT_PG_URL, help=f"where to create databases (default {DEFAULT_PG_URL})"
    )
    args = parser.parse_args(argv)
    small, large = sorted(int(size) for size in args.jobs.split(","))
    if small >= large:
        raise SystemExit("--jobs takes two different sizes")
    if args.reps < 1:
        raise SystemExit("--reps takes 1 or more")
    backends = [name for name in args.backends.split(",") if name]
    if unknown := set(backends) - set(BACKENDS):
        raise SystemExit(f"--backends: unknown {', '.join(sorted(unknown))}")
    if "postgresql" in backends and (why := postgres_unreachable(args.pg_url)):
        raise SystemExit(f"python -m bench.work: PostgreSQL: {why}")
    work = Path(tempfile.mkdtemp(prefix="asynctask-work-"))
    failed = True
    try:
        commit = gitref.commit_of(args.ref, parser.prog)
        export_ref(commit, work / "ref", parser.prog)
        trees = {THIS: ROOT, commit: work / "ref"}
        counted: dict[str, dict[tuple[str, str], list[float]]] = {name: defaultdict(list) for name in trees}
        with RedisServer(work) as server:
            for backend in backends:
                runs: dict[tuple[str, int], list[Run]] = defaultdict(list)
                for rep in range(args.reps):
                    # Alternating which tree drains first, so that a drift of the machine falls on both.
                    for name in list(trees)[:: 1 if rep % 2 == 0 else -1]:
                        for jobs in (small, large):
                            workdir = work / f"{backend}-{jobs}-{trees[name].name}-{rep}"
                            runs[(name, jobs)].append(
                                drain_all(trees[name], backend, jobs, args, server, workdir)
                            )
                for name in trees:
                    for rep in range(args.reps):
                        extra = per_job(runs[(name, small)][rep], runs[(name, large)][rep], large - small)
                        for (scenario, counter), value in extra.items():
                            counted[name][(f"{scenario}, {backend}", counter)].append(value)
        failed = False
    finally:
        # A failed drain's folder stays: the message names its worker log.
        if not failed:
            shutil.rmtree(work, ignore_errors=True)
    text, worse = table(counted[THIS], counted[commit], commit)
    print(text)
    print(f"\n{worse} count(s) above {commit}'s in every drain by more than {TOLERANCE:.0%}.")
    return 1 if worse else 0


if __name__ == "__main__":
    raise SystemExit(main())
