"""The check after the faults: every job ran, and nothing is stuck anywhere.

Settling waits until the queues are empty (the ordinary drain, however long it takes), then
allows ``2 x process_ttl`` after the last fault (or a few seconds after the queues emptied,
whichever is later) for every job to have run and every trace of the faults to be gone:
enough for a dead process's record to expire and a live one to return its jobs, and for a
live process to notice a claim it lost. A job run twice is allowed (delivery is at least
once) and counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tests.chaos.state import DRAIN_JOB, BrokerState, make_client, push_drain, push_one, summarize
from tests.chaos.workers import Runs, Timing, WorkerPool, WorkerProc

#: Seconds the last jobs may take to finish and be acknowledged once the queues are empty.
SLACK = 5.0
#: Seconds the ordinary drain may take at most (a bound against a hung test, not a target).
DRAIN_LIMIT = 240.0


@dataclass(frozen=True)
class Drain:
    """A chaos test's drain: ``jobs`` jobs of up to ``pause_ms`` each, run by two workers with
    ``timing``; ``runs_between`` runs go by before each fault, so that each hits a drain in full
    swing."""

    jobs: int
    pause_ms: int
    timing: Timing
    runs_between: int

    def start(self, pool: WorkerPool, state: BrokerState, runs: Runs) -> tuple[list[WorkerProc], list[str]]:
        """The two workers, and the jids of the drain, once its first ``runs_between`` ran."""
        workers = pool.start(state, self.timing)
        jids = push_drain(state.settings, self.jobs, self.pause_ms)
        assert runs.wait_done(self.runs_between, 60), f"the drain did not start\n{pool.logs()}"
        return workers, jids

    def kill_the_recovered(
        self, pool: WorkerPool, workers: list[WorkerProc], runs: Runs
    ) -> tuple[WorkerProc, float, int]:
        """The last fault, a kill -9 of the worker a peer recovered from (the worst case: if it
        never registered its lists again, nobody can return what it held). Returns it, when it
        was killed, and the runs done then, fewer than the drain's jobs (else it tested nothing)."""
        victim = pool.peer_recovered(workers)
        victim.kill9()
        killed = time.monotonic()
        done = runs.count_done()
        assert done < self.jobs, "the drain ended before the last fault: it tested nothing"
        return victim, killed, done


@dataclass(frozen=True)
class Outcome:
    jobs: int
    duplicates: int
    #: Seconds from the last fault until everything had run and nothing was left.
    settled_after: float
    #: What was missing or left at the deadline; None when everything settled.
    failure: str | None = None


def settle(
    state: BrokerState, runs: Runs, jids: list[str], last_fault: float, timing: Timing, pool: WorkerPool
) -> Outcome:
    """Wait for the drain; the outcome says where each missing job is and what is left, if any."""
    hard = time.monotonic() + DRAIN_LIMIT
    while state.queued() > 0:
        if time.monotonic() > hard:
            raise AssertionError(f"the queues did not drain within {DRAIN_LIMIT} s\n{pool.logs()}")
        time.sleep(0.25)
    deadline = max(last_fault + 2 * timing.ttl, time.monotonic() + SLACK)
    expected = set(jids)
    while True:
        done = runs.done()
        missing = expected - done.keys()
        left = state.leftovers()
        if not missing and not left:
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.25)
    settled = time.monotonic() - last_fault
    duplicates = sum(n - 1 for jid, n in done.items() if jid in expected and n > 1)
    failure = None
    if missing or left:
        failure = (
            f"{settled:.0f} s after the last fault (2 x TTL = {2 * timing.ttl} s): "
            f"{len(missing)} of {len(expected)} job(s) never ran; where they are:\n"
            f"{summarize(state.locate(missing), missing) if missing else '  -'}\n"
            "left in the broker:\n  " + "\n  ".join(left or ["nothing"])
        )
    return Outcome(len(expected), duplicates, settled, failure)


def scheduled_job_runs(state: BrokerState, runs: Runs, pool: WorkerPool, ahead: float = 2.0) -> str | None:
    """A job scheduled now (``at``) runs: the live workers' pollers survived. Returns what
    went wrong, or None."""
    client = make_client(state.settings)
    try:
        due = time.time() + ahead
        jid = push_one(client, DRAIN_JOB, at=due)
    finally:
        client.close()
    # Each process polls on average every poll x processes seconds, at most 1.5 times that.
    bound = ahead + 1.5 * pool.timing.poll * len(pool.started) + SLACK
    deadline = time.monotonic() + bound
    while (run := runs.first_done(jid)) is None:
        if time.monotonic() > deadline:
            return (
                f"a job scheduled {ahead} s ahead did not run within {bound:.1f} s: no live poller "
                f"moved it (it is in: {state.locate([jid]).get(jid, 'nowhere')})"
            )
        time.sleep(0.05)
    print(f"scheduled job ran {run.at - due:.2f} s after it was due")
    return None


def check(failures: list[str | None], pool: WorkerPool) -> None:
    """Fail with every failure found, and the workers' logs, if there is any."""
    found = [failure for failure in failures if failure]
    assert not found, "\n\n".join(found) + f"\n\n{pool.logs()}"
