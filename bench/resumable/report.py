"""The resumable section of RESULTS.md and stdout, and ``resumable.json``.

Medians of the repetitions with (min-max); the resumable ÷ plain ratio is taken per repetition
between the two jobs the same worker ran.
"""

from __future__ import annotations

from bench.core.fmt import fixed, ratio, spread, table
from bench.core.report import (
    BACKEND_NAMES,
    DrainReport,
    at_most,
    both_runs,
    per_backend,
    per_rep,
)
from bench.resumable.section import PLAIN, RESUMABLE, WARMUP_ITERATIONS, ResumableResults

#: Target: a resumable job's run time ÷ the same loop's as a plain job.
OVERHEAD = 1.10


def paired(results: ResumableResults, backend: str) -> list[float]:
    """Per repetition with both jobs: the resumable job's run time ÷ the plain job's."""
    return per_rep(results, backend, RESUMABLE, PLAIN, lambda ours, base: ours.seconds / base.seconds)


def seconds(value: float) -> str:
    return f"{value:.3f}"


def time_table(results: ResumableResults) -> list[str]:
    header = [
        "backend", "iterations", "worker processes x job slots", "plain job s", "resumable job s",
        "plain ns/iteration", "resumable ns/iteration", "**resumable ÷ plain**",
    ]  # fmt: skip
    return table(
        header,
        (
            [
                BACKEND_NAMES[backend],
                f"{results.settings['iterations']:,}",
                "1 x 1",
                spread((r.seconds for r in plain), seconds),
                spread((r.seconds for r in resumable), seconds),
                spread((r.ns_per_iteration() for r in plain), fixed(0)),
                spread((r.ns_per_iteration() for r in resumable), fixed(0)),
                f"**{spread(paired(results, backend), ratio)}**",
            ]
            for backend, plain, resumable in both_runs(results, PLAIN, RESUMABLE)
        ),
    )


def _goals(results: ResumableResults, backend: str) -> list[str]:
    iterations = results.settings["iterations"]
    return at_most(
        f"{BACKEND_NAMES[backend]}: run time of a {iterations:,}-iteration no-op job, resumable ÷ plain",
        OVERHEAD,
        paired(results, backend),
    )


INTRO = (
    "A job of {iterations:,} no-op iterations, resumable (a generator the runtime drives, "
    "checkpoint interval {checkpoint_interval:g} s) against the same loop as a plain job, "
    "run by one worker process with one job slot{quick_sizes}; {reps} rep(s); median (min-max). "
    "Run time as the worker's server middleware measures it."
)


METHOD = f"""\
- **Jobs** (`bench/resumable/jobs.py`): one generator, `_indexes(n, cursor=None)`, yields every
  index from `cursor + 1` (0 without one) up to `n`. `resumable_noop` is that generator itself
  registered as a job, so resumable (no `yield from` wrapper, which would add a frame switch per
  iteration); `plain_noop(n)` runs `for _ in _indexes(n, None): pass`. The two differ only by what the
  resumable runtime (`asynctask/worker/resumable.py`) adds: loading the job's checkpoint, driving the
  generator in batches with its checks between them, and storing a checkpoint at most every
  `checkpoint_interval` seconds (the default; a job shorter than that stores none).
- **Timing**: the jobs module adds a server middleware, innermost in the chain, that reads
  `time.perf_counter()` before and after `call_next()` and appends the difference to a file named by
  `BENCH_RESUMABLE_TIMES`, with the job's class, its error if any and, for a resumable job, the
  last checkpoint the runtime saw (`current_job().iteration`). Pushing and fetching the job are left
  out. So are a finished resumable job's acknowledgement and the removal of its checkpoint, which the
  worker does after the middleware returns; a plain job's acknowledgement goes with the next claim.
- **Worker**: `python -m asynctask worker --broker URL -r bench/resumable/jobs.py -c 1 -q default`,
  tracking off, one per broker and repetition, from an empty broker. The bench pushes one job, waits
  for its line in the file, then pushes the next: first a warm-up pair of {WARMUP_ITERATIONS:,}
  iterations each (plain, then resumable, not counted), then the measured plain and resumable jobs.
- **Checks**: a run is an error unless its job ran without failing, under its own name, and the
  runtime saw the resumable job yield its last index, N - 1; after the worker stops, the queue must be
  empty.
- **Order**: per repetition, the brokers in turn; within a worker, plain then resumable, reversed
  every other repetition. The ratio is taken per repetition, between the two jobs of the same worker;
  the target is met when the median ratio is at most {OVERHEAD:.2f}.
"""


REPORT = DrainReport[ResumableResults](
    "Resumable jobs",
    "resumable jobs",
    "resumable.json",
    METHOD,
    INTRO,
    time_table,
    per_backend(_goals),
    derived=lambda r: {"ns_per_iteration": r.ns_per_iteration()},
    extra=lambda results: {
        "resumable_over_plain": {b: paired(results, b) for b in results.settings["backends"]}
    },
)
target_rows = REPORT.judged_rows
