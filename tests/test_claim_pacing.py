"""How a worker process paces its claims (asynctask.brokers.pacing): few claims under way, each
asking for a batch when jobs run shorter than a claim's round trip."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from asynctask.brokers.fetcher import Fetcher, UnitOfWork
from asynctask.brokers.pacing import CLAIMS_UNDER_WAY, PREFETCH_LIMIT, ClaimPacing
from asynctask.settings import QueueSpec


def measured(job_seconds: float, found: int) -> ClaimPacing:
    """Pacing after one job of ``job_seconds`` ran and a claim of a 2 ms round trip found ``found``."""
    pacing = ClaimPacing()
    pacing.ran(job_seconds)
    pacing.claimed(found, 0.002)
    return pacing


def test_before_any_job_ran_a_claim_asks_for_the_waiting_threads() -> None:
    pacing = ClaimPacing()
    assert (pacing.wanted(3, 10, True), pacing.must_wait()) == (3, False)


def test_short_jobs_are_claimed_in_batches_by_few_claims() -> None:
    pacing = measured(0.0001, 3)
    assert pacing.wanted(3, 10, True) == 10 * PREFETCH_LIMIT
    pacing.claiming = CLAIMS_UNDER_WAY - 1
    assert not pacing.must_wait()
    pacing.claiming = CLAIMS_UNDER_WAY
    assert pacing.must_wait()
    # A claim that found all it asked for: the next one batches all the same.
    pacing.claimed(60, 0.002)
    assert pacing.wanted(3, 10, True) == 10 * PREFETCH_LIMIT


@pytest.mark.parametrize(
    ("job_seconds", "wanted"),
    [
        pytest.param(0.001, 20, id="a_batch_is_what_the_threads_run_in_a_round_trip"),
        pytest.param(0.05, 3, id="jobs_longer_than_a_round_trip_are_claimed_one_per_waiting_thread"),
    ],
)
def test_a_claim_asks_for_what_its_threads_run_in_a_round_trip(job_seconds: float, wanted: int) -> None:
    assert measured(job_seconds, 1).wanted(3, 10, True) == wanted


def test_idle_threads_after_a_claim_that_found_nothing_ask_for_themselves_only() -> None:
    """The queues were empty: what comes next may run far longer than the jobs before, and
    another process's idle threads could start it."""
    pacing = measured(0.0001, 0)
    assert pacing.wanted(2, 2, False) == 2
    # A claim carrying finished jobs: they flow through this process (a feed's slots all out
    # until these ends free them), so it batches.
    assert pacing.wanted(2, 2, True) == 2 * PREFETCH_LIMIT
    # The last claim found some, fewer than wanted: a batch with or without acknowledgements.
    pacing.claimed(1, 0.002)
    assert pacing.wanted(2, 2, False) == 2 * PREFETCH_LIMIT


def test_jobs_come_in_batches_while_short_jobs_are_found_several_at_a_time() -> None:
    pacing = measured(0.0001, 5)
    assert pacing.batched
    # Idle threads' claims find nothing: what the jobs were like is still so.
    pacing.claimed(0, 0.002)
    assert pacing.batched
    # One job at a time: they come as they are pushed.
    pacing.claimed(1, 0.002)
    assert not pacing.batched
    pacing.claimed(5, 0.002)
    pacing.woken()
    assert not pacing.batched
    pacing.claimed(5, 0.002)
    for _ in range(100):
        pacing.ran(0.01)
    pacing.claimed(5, 0.002)
    assert not pacing.batched


def test_the_averages_follow_the_measurements() -> None:
    pacing = ClaimPacing()
    pacing.ran(0.01)
    assert pacing.job_seconds == 0.01
    for _ in range(100):
        pacing.ran(0.0001)
    assert pacing.job_seconds < 0.0002


class SlotFetcher(Fetcher):
    """Claims from an endless supply, at most as many jobs as the claim acknowledges (and one
    more): a fed task whose slots are all out, each end freeing one; ``plentiful``: as many as
    the claim wants. Records each claim."""

    def __init__(self, seconds: float, plentiful: bool = False) -> None:
        super().__init__("pacing-test", [QueueSpec("default")], None)
        self.seconds = seconds
        self.plentiful = plentiful
        self.ids = itertools.count()
        self.record_lock = threading.Lock()
        self.under_way = 0
        #: (claims under way with this one, jobs wanted) per claim.
        self.claims: list[tuple[int, int]] = []

    def claim(self, wanted: int, acks: list[UnitOfWork], transitions: list[str]) -> list[UnitOfWork]:
        with self.record_lock:
            self.under_way += 1
            self.claims.append((self.under_way, wanted))
        time.sleep(self.seconds)
        with self.record_lock:
            self.under_way -= 1
            found = wanted if self.plentiful else min(wanted, len(acks) + 1)
            return [UnitOfWork("default", b"{}", str(next(self.ids))) for _ in range(found)]

    def wait(self, block_on: int) -> UnitOfWork | None:
        return None

    def register(self) -> None: ...
    def settle(self, acks: list[UnitOfWork], transitions: list[str]) -> None: ...
    def interrupt(self) -> None: ...
    def held(self) -> list[UnitOfWork]:
        return []

    def requeue(self, units: Sequence[UnitOfWork]) -> int:
        return 0

    def requeue_all(self, *, forget: bool) -> int:
        return 0


def run_threads(fetcher: SlotFetcher, threads: int, jobs: int, job_seconds: float) -> int:
    """``threads`` processor threads each running ``jobs`` jobs; returns how many ran."""
    ran = itertools.count()

    def processor() -> None:
        unit = None
        for _ in range(jobs):
            unit = fetcher.fetch(unit, 0)
            if unit is not None:
                next(ran)
                time.sleep(job_seconds)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for done in [pool.submit(processor) for _ in range(threads)]:
            done.result(timeout=30)
    return next(ran)


def test_scarce_short_jobs_go_through_few_claims_of_a_batch_each() -> None:
    fetcher = SlotFetcher(seconds=0.003)
    assert run_threads(fetcher, threads=8, jobs=100, job_seconds=0) == 800
    assert max(under_way for under_way, _ in fetcher.claims) <= CLAIMS_UNDER_WAY
    assert max(wanted for _, wanted in fetcher.claims) == 8 * PREFETCH_LIMIT
    # Each claim acknowledges the many jobs run meanwhile, and so brings many.
    assert len(fetcher.claims) < 800 / 4


def test_plentiful_short_jobs_go_through_few_claims_of_a_batch_each() -> None:
    """Not a claim per waiting thread: one process's threads took a batch only while jobs were
    scarce, and spent a round trip per few jobs while they were plentiful."""
    fetcher = SlotFetcher(seconds=0.003, plentiful=True)
    assert run_threads(fetcher, threads=8, jobs=100, job_seconds=0.0001) >= 800
    assert max(under_way for under_way, _ in fetcher.claims) <= CLAIMS_UNDER_WAY
    assert max(wanted for _, wanted in fetcher.claims) > 8
    assert len(fetcher.claims) < 800 / 8


def test_scarce_long_jobs_are_claimed_one_per_waiting_thread() -> None:
    fetcher = SlotFetcher(seconds=0.001)
    run_threads(fetcher, threads=4, jobs=15, job_seconds=0.01)
    assert max(wanted for _, wanted in fetcher.claims) <= 4
