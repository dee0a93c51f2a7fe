"""The runtime section's order of work, so that noise hits every configuration alike.

For each repetition: every (worker processes, job slots, system) drain of N no-op jobs in
turn, each starting with the system's bulk enqueue, the systems in an order reversed every
other repetition (a system drained right after another in one repetition runs right before it
in the next); then every system's one-call-per-job enqueue pass. Last, one
Redis-command-count pass per system.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.core.redis_server import RedisServer
from bench.core.system import System
from bench.runtime import runner
from bench.runtime.report import Results


def run(results: Results, systems: list[System], server: RedisServer, workdir: Path) -> None:
    """Every pass of ``results.settings``, appended to ``results`` as it ends."""
    s = results.settings
    for rep in range(s["reps"]):
        in_turn = systems if rep % 2 == 0 else systems[::-1]
        for processes in s["processes"]:
            for concurrency in s["concurrency"]:
                for system in in_turn:
                    jobs = system.jobs(s["jobs"])
                    drain = runner.process(system, server, concurrency, jobs, workdir, processes)
                    results.process.append((rep, drain))
                    _progress(f"rep {rep + 1}/{s['reps']} {system.name} {processes}x{concurrency}", drain)
        for system in in_turn if s["single_jobs"] else []:
            single = runner.enqueue(system, server, "single", s["single_jobs"])
            results.single.append((rep, single))
            print(
                f"rep {rep + 1}/{s['reps']} {system.name} one call per job: {single.rate:,.0f}/s",
                file=sys.stderr,
            )
    for system in systems if s["commands_jobs"] else []:
        jobs = system.jobs(s["commands_jobs"])
        drain = runner.process(system, server, s["commands_concurrency"], jobs, workdir)
        results.commands.append(drain)
        _progress(f"commands {system.name}", drain)


def _progress(label: str, drain: runner.ProcessRun) -> None:
    if drain.error:
        print(f"{label}: FAILED: {drain.error}", file=sys.stderr)
        return
    print(
        f"{label}: enqueue {drain.enqueue.rate:,.0f}/s, steady {drain.steady_rate:,.0f}/s, "
        f"incl. start-up {drain.total_rate:,.0f}/s, {drain.redis_cmds / drain.jobs:.2f} cmds/job",
        file=sys.stderr,
    )
