"""The integrations section of RESULTS.md and stdout, and ``integrations.json``.

Medians of the repetitions with (min-max); each ratio is taken per repetition, between the two
figures of the same runtime.
"""

from __future__ import annotations

from bench.core.fmt import fixed, rate, ratio, spread, table
from bench.core.report import DrainReport, at_least, at_most
from bench.integrations.section import CREATE, NOOP, RUNTIMES, IntegrationResults, IntegrationRun

NAMES = {"celery": "Celery", "rq": "RQ", "dramatiq": "Dramatiq"}
#: Targets: a tracked no-op job's rate ÷ the runtime's own, at least; create_task's time ÷ the
#: runtime's own bulk send, at most.
TRACKED_RATE = 0.85
CREATE_TIME = 2.0


def _ok(results: IntegrationResults, runtime: str, case: str) -> list[IntegrationRun]:
    return [r for _, r in results.runs if r.backend == runtime and r.case == case and not r.error]


def runtimes_table(results: IntegrationResults) -> list[str]:
    items = results.settings["items"]
    header = [
        "runtime", "untracked jobs/s", "tracked jobs/s", "**tracked ÷ untracked**",
        f"bulk send of {items:,} jobs, s", f"create_task of {items:,} items, s", "**create ÷ bulk**",
    ]  # fmt: skip
    rows = []
    for runtime in RUNTIMES:
        noop, create = _ok(results, runtime, NOOP), _ok(results, runtime, CREATE)
        if noop or create:
            rows.append(
                [
                    NAMES[runtime],
                    spread((r.untracked for r in noop), rate),
                    spread((r.tracked for r in noop), rate),
                    f"**{spread((r.ratio() for r in noop), ratio)}**",
                    spread((r.untracked for r in create), fixed(2)),
                    spread((r.tracked for r in create), fixed(2)),
                    f"**{spread((r.ratio() for r in create), ratio)}**",
                ]
            )
    return table(header, rows)


def _goals(results: IntegrationResults) -> list[str]:
    rows = []
    for runtime in RUNTIMES:
        noop = [r.ratio() for r in _ok(results, runtime, NOOP)]
        rows += at_least(f"{NAMES[runtime]}: no-op jobs/s, tracked ÷ untracked", TRACKED_RATE, noop)
        create = [r.ratio() for r in _ok(results, runtime, CREATE)]
        rows += at_most(
            f"{NAMES[runtime]}: create_task ÷ the runtime's bulk send", CREATE_TIME, create, digits=1
        )
    return rows


INTRO = (
    "Each runtime's own worker, one process, draining {jobs:,} no-op jobs with tracking attached "
    "and without; `create_task` of {items:,} items through its client against its own bulk "
    "send{quick_sizes}; {reps} rep(s); median (min-max)."
)


METHOD = """\
- **Runtimes**: Celery (Redis broker, prefork pool), RQ (`rq worker`, a work horse per job) and
  Dramatiq (Redis broker), as installed in the project's environment by the extras `celery`, `rq` and
  `dramatiq`; each on a database of the section's private Redis of its own.
- **Drain** (`bench/integrations/<runtime>.py`, `noop_rate`): the jobs are queued first, then one
  worker process of the runtime drains them; the rate is the jobs over the time from the first start
  to the last end, as the runtime's workers record them. Untracked: the runtime's own bulk send to a
  worker without tracking. Tracked: one task's chunks (`create_task`, chunk size 1), a worker with the
  integration attached, writing to AsyncTask's tracking stream on the same Redis, applied to an empty
  PostgreSQL tracking database (SQLite files when PostgreSQL cannot be reached) by AsyncTask's flusher
  process beside the worker; SQL catching up is not timed.
- **Create** (`create_seconds`): `create_task` of the items through the runtime's client (the task and
  its events in one SQL transaction, then the sends), against the runtime's fastest bulk send of as
  many jobs; no worker runs.
- **Order**: per repetition, the runtimes in turn, reversed every other repetition, and within a
  runtime untracked then tracked, reversed every other repetition too.
"""


REPORT = DrainReport[IntegrationResults](
    "Tracking attached to Celery, RQ and Dramatiq",
    "integrations",
    "integrations.json",
    METHOD,
    INTRO,
    runtimes_table,
    _goals,
    derived=lambda r: {"ratio": r.ratio()},
)
target_rows = REPORT.judged_rows
