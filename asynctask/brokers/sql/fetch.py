"""Claiming jobs from the SQL jobs table for one worker process.

A claimed job keeps its row, with ``locked_by`` set to this process, until it is
acknowledged (deleted), moved to the retry or dead set, or given back (``locked_by`` NULL
again, keeping its id: it is fetched next among its priority). If the process dies, its
locks are taken back by a live process once its heartbeat expires (``processes``).

One transaction per claim, shared by the process's threads: it deletes the jobs finished
since the last one, applies the pending tracking transitions, reads the cancellation
generation and claims as many jobs as threads are waiting for. On PostgreSQL without
transitions that is a single statement, outside BEGIN/COMMIT.

When every queue is empty, one thread at a time watches for new jobs (``wake``), claims for
every waiting thread when some come, and hands the others theirs through the buffer.

Queues served fairly (``Fetcher.fair``) are claimed in turns (docs/internals/fair-share-sql.md):
the claim statement depends on which of the queues, in the order tried, are.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from itertools import groupby
from typing import Any

from sqlalchemy import TextClause

from asynctask import payload
from asynctask.brokers.fetcher import Fetcher, UnitOfWork
from asynctask.brokers.sql.feeds import SqlFeeds, acknowledged_feed, is_fed
from asynctask.brokers.sql.flow import UNIQUE_MARK, Flow, flow_claimed, is_flow
from asynctask.brokers.sql.predicates import PLAIN_WAITING, TAGGED_WAITING, Fairness, Mix
from asynctask.brokers.sql.transactions import Store
from asynctask.brokers.sql.wake import Wake
from asynctask.settings import Settings
from asynctask.tracking.outbox import Outbox

logger = logging.getLogger("asynctask.fetch")


class SqlFetcher(Fetcher):
    def __init__(
        self,
        store: Store,
        flow: Flow,
        feeds: SqlFeeds,
        identity: str,
        settings: Settings,
        wake: Wake,
        outbox: Outbox | None = None,
    ) -> None:
        super().__init__(identity, settings.served_queues, outbox)
        self._store = store
        self._flow = flow
        self._feeds = feeds
        self._sql = store.sql
        self._idle_claim = self._sql.idle_claim(len(self.queue_names))
        self._ttl = settings.process_ttl
        self._timeout = settings.fetch_timeout
        self._wake = wake
        #: The kinds of rows the next PostgreSQL claim reads in the fair queues: what the last
        #: claim saw waiting (``statements.Mix``).
        self._mix: Mix = "both"
        self._watching = False
        #: Set when the process goes quiet: waiting threads return at once.
        self._interrupted = False

    @property
    def mix(self) -> Mix:
        """The kinds of rows the next PostgreSQL claim reads in the fair queues."""
        return self._mix

    def register(self) -> None:
        """Write this process's record, live for ``process_ttl`` (only the expiry, if a
        heartbeat wrote the record already).

        A process without a live record is dead to the others, who take its claims back: a
        worker whose first heartbeat failed must not claim jobs unprotected.
        """
        now = time.time()
        with self._store.write(single_statement=True) as tx:
            tx.connection.execute(
                self._sql.processes.register,
                {"identity": self.identity, "beat": now, "now": now, "ttl": self._ttl, "quiet": False},
            )

    def claim(self, wanted: int, acks: list[UnitOfWork], transitions: list[str]) -> list[UnitOfWork]:
        if self._watching and not (acks or transitions):
            # A thread is watching for new jobs and claims for every waiting thread when some
            # come: idle threads asking as well would only poll the database.
            return []
        return self._claim_now(wanted, acks, transitions)

    def _claim_now(self, wanted: int, acks: list[UnitOfWork], transitions: list[str]) -> list[UnitOfWork]:
        mix = self._mix
        claimed = self._claim_as(mix, wanted, acks, transitions)
        if claimed is None and self._mix != mix:
            # Nothing of the kinds read, but the other kind waits: read it at once, rather
            # than when the next job is announced.
            claimed = self._claim_as(self._mix, wanted, [], [])
        return claimed or []

    def _claim_as(
        self, mix: Mix, wanted: int, acks: list[UnitOfWork], transitions: list[str]
    ) -> list[UnitOfWork] | None:
        """The jobs claimed, reading ``mix`` in the fair queues (on PostgreSQL); None if no
        row was claimed."""
        order = self.queue_order()
        fair = tuple(self.fair[name] for name in order)
        keyed_claim = self._sql.keyed_claim(fair, wanted, mix)
        me = self.identity
        params: dict[str, Any] = {"ids": self._sql.ids([u.ref for u in acks]), "me": me}
        params.update(wanted=wanted, now=payload.now())
        if self._sql.postgres:
            params["queues"] = order
        else:
            params.update((f"q{i}", name) for i, name in enumerate(order))
        self._wake.arm()
        if not (self._sql.postgres or acks or transitions):
            # An idle thread's claim on SQLite reads first, so that idle workers do not take
            # the file's write lock (and make busy ones wait for it) several times a second.
            with self._store.read() as connection:
                generation, found = connection.execute(self._idle_claim, params).one()
            if not found:
                self.cancel_generation = str(generation).encode()
                return None
        # Keyed or unique jobs among the acknowledged: their ends free slots and unique keys
        # in the claim's transaction. Jobs of fed tasks: their ends release from their feeds.
        flow_acks = any(is_flow(u.payload) for u in acks)
        fed_acks = any(is_fed(u.payload) for u in acks)
        if keyed_claim is not None and flow_acks and not (transitions or fed_acks or self._unique(acks)):
            # BEGIN, the keys' lock, the statement that counts their slots (after the lock:
            # flow-control-sql.md, Races and locks) and COMMIT, in one round trip.
            ids = {"ids": params["ids"]}
            piped = self._store.pipelined(
                [(self._flow.statements.lanes_of, ids), (keyed_claim, params)], index_order=any(fair)
            )
            generation, claimed = self._split(piped, fair)
            return self._units(order, fair, claimed, generation)
        # PostgreSQL, unkeyed jobs of fed tasks: acknowledged as any job, then released from
        # right after the commit (``_release_after``); otherwise in the claim's transaction.
        late = self._late_feeds(acks) if fed_acks and self._sql.postgres and not flow_acks else None
        release_here = fed_acks and late is None
        claim = self._sql.claim(fair, wanted, mix)
        if self._sql.postgres and not (transitions or flow_acks or release_here):
            # The claim alone, prepared at its first run with a generic plan (``pipelined``).
            generation, claimed = self._split(
                self._store.pipelined([(claim, params)], index_order=any(fair)), fair
            )
        else:
            generation, claimed = self._claim_in_transaction(
                claim,
                keyed_claim if flow_acks else None,
                params,
                fair,
                acks,
                transitions,
                flow_acks=flow_acks,
                release_here=release_here,
            )
        if late is not None:
            self._release_after(late)
        return self._units(order, fair, claimed, generation)

    def _claim_in_transaction(
        self,
        claim: TextClause,
        keyed_claim: TextClause | None,
        params: dict[str, Any],
        fair: Fairness,
        acks: list[UnitOfWork],
        transitions: list[str],
        *,
        flow_acks: bool,
        release_here: bool,
    ) -> tuple[object, list[Any]]:
        """Record ``transitions``, acknowledge ``acks`` (``flow_acks``: keyed or unique jobs
        among them; ``release_here``: release from their feeds) and claim, in one transaction;
        return the generation and the rows claimed. ``keyed_claim``: PostgreSQL's claim that
        also promotes the acknowledged keyed jobs' next jobs (None when none is acknowledged)."""
        with self._store.write() as tx:
            connection = tx.connection
            self._store.record(connection, transitions)
            # Tracking rows (the task's), then feeds, then keys: the order of every path.
            acked = [int(u.ref) for u in acks]
            feeds = self._feeds.lock_of_rows(connection, acked) if release_here else []
            if self._sql.postgres:
                if keyed_claim is not None:
                    # The keys are locked by a statement of their own, before the one that
                    # counts their slots (flow-control-sql.md, Races and locks), which then
                    # acknowledges, promotes and claims.
                    self._flow.lock_ending(connection, acked, [u.payload for u in acks])
                    claim = keyed_claim
                if any(fair) and not feeds:
                    # Planned without sorts, as the claim alone is, in one round trip with its
                    # settings; not before a feed's release, whose statements this transaction
                    # runs next (rare: a fed job whose payload did not name its feed).
                    found: Sequence[Any] = self._store.pipelined_within(
                        connection, [(claim, params)], index_order=True
                    )
                else:
                    found = connection.execute(claim, params).all()
                generation, claimed = self._split(found, fair)
                # After the acknowledgement, which freed the slots: the jobs released are
                # announced, and claimed by the next claim here or elsewhere.
                if feeds:
                    self._feeds.release(tx, feeds, params["now"], lanes_held=flow_acks)
                return generation, claimed
            if flow_acks:
                # Before the claim, which may then claim the jobs promoted.
                with self._flow.ending(tx, acked, [u.payload for u in acks]):
                    connection.execute(self._sql.ack, params)
            elif acks:
                connection.execute(self._sql.ack, params)
            if feeds:
                self._feeds.release(tx, feeds, params["now"])
            generation = connection.execute(self._sql.generation).scalar_one()
            return generation, list(connection.execute(claim, params).all())

    def _split(self, found: Sequence[Any], fair: Fairness) -> tuple[object, list[Any]]:
        """A PostgreSQL claim's rows split into the cancellation generation and the rows
        claimed. In a fair claim the generation row also holds the kinds of rows it saw
        waiting: stored here, for the next claim to read."""
        row = next(row for row in found if row[0] is None)
        if any(fair):
            self._mix = next_mix(row[4], self._mix)
        return row[1], [row for row in found if row[0] is not None]

    def _plain_served(self, rounds: dict[str, int]) -> None:
        """Store the plain share's round in the queues a claim served it in, in a transaction
        of its own, once a round at most per queue (the next claims then serve the round's
        other shares first): a lost write only gives the plain share one more job."""
        if not rounds:
            return
        try:
            with self._store.write(single_statement=len(rounds) == 1) as tx:
                for queue, next_round in sorted(rounds.items()):
                    tx.connection.execute(self._sql.push.plain_served, {"queue": queue, "next": next_round})
        except self._store.errors as exc:
            logger.warning("could not store the plain share's round (it may run a job more): %s", exc)

    @staticmethod
    def _late_feeds(acks: list[UnitOfWork]) -> Counter[str] | None:
        """How many acknowledged jobs name each feed, read from their payloads; None if one
        of them names none that can be read (its row's feed is then locked before the ack)."""
        fed = [acknowledged_feed(u) for u in acks if is_fed(u.payload)]
        if any(feed is None for feed in fed):
            return None
        return Counter(str(feed) for feed in fed)

    def _release_after(self, feeds: Counter[str]) -> None:
        """Count the ends of the fed jobs a claim just acknowledged; the feeds release in a
        transaction of their own, once the claim is committed, every ``release_step`` ends
        (``SqlFeeds.ended``): the feed's lock is then held only by releases (short, and
        committed without waiting for the disk), never across an acknowledgement's commit,
        which made a feed's ends commit one after the other (a drain of one feed by 20 threads
        ran 335 to 680 jobs/s). A process that dies in between leaves the slots to the ticker,
        which looks at a feed holding jobs a second after its last release."""
        try:
            self._feeds.ended(feeds)
        except self._feeds.errors as exc:
            # The claim is committed: its jobs are this process's.
            logger.warning("a feed's release failed (the ticker releases it): %s", exc)

    @staticmethod
    def _unique(acks: list[UnitOfWork]) -> bool:
        return any(UNIQUE_MARK in u.payload for u in acks)

    def _units(
        self, order: list[str], fair: Fairness, claimed: list[Any], generation: object
    ) -> list[UnitOfWork] | None:
        """The claimed rows as units of work, in queue order, less those over their rate; None
        if there were none."""
        self.cancel_generation = str(generation).encode()
        self._wake.drain()
        if not claimed:
            return None
        position = {name: i for i, name in enumerate(order)}
        claimed.sort(key=lambda row: (position[row[1]], row[2], row[0]))
        if any(fair):
            claimed = in_turns(claimed, self.fair)
            self._plain_served(plain_rounds(claimed, self.fair))
        if self._sql.postgres:
            units = [UnitOfWork(row[1], row[3].encode(), row[0]) for row in claimed]
        else:
            # SQLite returns the stored bytes, whatever they are (``statements.STORED_PAYLOAD``).
            units = [UnitOfWork(row[1], row[3], row[0]) for row in claimed]
        return self._checked(units)

    def _checked(self, units: list[UnitOfWork]) -> list[UnitOfWork]:
        """The claimed jobs less those over their rate limit, which go back to the schedule;
        unique keys held until start are released for the others. One transaction right
        after the claim, only if a claimed job carries a rate limit or a unique key."""
        flows = flow_claimed((int(u.ref), u.payload) for u in units)
        if not flows:
            return units
        with self._store.write() as tx:
            postponed = self._flow.after_claim(tx.connection, self.identity, flows)
        return [u for u in units if u.ref not in postponed]

    def wait(self, block_on: int) -> UnitOfWork | None:
        """Wait for jobs (up to the fetch timeout, twice that for the thread that ends up
        watching). ``block_on`` is not needed: the one watching thread hears of every queue."""
        deadline = time.monotonic() + self._timeout
        with self._ready:
            while True:
                if self._buffer:
                    return self._buffer.popleft()
                if self._interrupted:
                    return None
                # Taking over before looking at the clock: a thread woken by the watcher's
                # leaving, its own wait over, would otherwise return and claim like every
                # other such thread, a claim each at every handover.
                if not self._watching:
                    self._watching = True
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._ready.wait(remaining)
        try:
            # A full fetch timeout of watching: a watcher that took over with little of its
            # own wait left would hand over at once, and every handover is a claim.
            return self._watch(time.monotonic() + self._timeout)
        finally:
            with self._ready:
                self._watching = False
                self._ready.notify_all()

    def _watch(self, deadline: float) -> UnitOfWork | None:
        # Claim once before waiting: the claim that led here may have been skipped because
        # another thread was watching, and only a claim arms the wake-up for what comes next.
        woken = True
        while True:
            if woken:
                with self._lock:
                    # Every thread inside fetch() without a job, this one included.
                    wanted = max(1, self._waiting)
                units = self._claim_now(wanted, [], [])
                if units:
                    with self._lock:
                        self._buffer.extend(units[1:])
                    return units[0]
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._interrupted:
                return None
            woken = self._wake.wait(remaining)

    def interrupt(self) -> None:
        with self._ready:
            self._interrupted = True
            self._ready.notify_all()
        self._wake.interrupt()

    def settle(self, acks: list[UnitOfWork], transitions: list[str]) -> None:
        flow_acks = any(is_flow(u.payload) for u in acks)
        fed_acks = any(is_fed(u.payload) for u in acks)
        with self._store.write(single_statement=not (transitions or flow_acks or fed_acks)) as tx:
            self._store.record(tx.connection, transitions)
            feeds = self._feeds.lock_of_rows(tx.connection, [int(u.ref) for u in acks]) if fed_acks else []
            if not acks:
                return
            params = {"ids": self._sql.ids([u.ref for u in acks]), "me": self.identity}
            if not flow_acks:
                tx.connection.execute(self._sql.ack, params)
            else:
                with self._flow.ending(tx, [int(u.ref) for u in acks], [u.payload for u in acks]):
                    tx.connection.execute(self._sql.ack, params)
            if feeds:
                self._feeds.release(tx, feeds, payload.now(), lanes_held=flow_acks)

    def requeue(self, units: Sequence[UnitOfWork]) -> int:
        """Unlock claimed jobs; they keep their ids, so each is fetched next among its priority."""
        if not units:
            return 0
        with self._store.write(single_statement=True) as tx:
            result = tx.connection.execute(
                self._sql.unlock, {"ids": self._sql.ids([u.ref for u in units]), "me": self.identity}
            )
            tx.announce(u.queue for u in units)
        return int(result.rowcount)

    def held(self) -> list[UnitOfWork]:
        with self._store.read() as connection:
            rows = connection.execute(self._sql.held, {"me": self.identity}).all()
        return [UnitOfWork(queue, job.encode(), job_id) for job_id, queue, job in rows]

    def requeue_all(self, *, forget: bool) -> int:
        """Unlock every job this process holds. ``forget`` changes nothing here: the locks are
        the only trace of the claims (the process record goes with ``clear_process``)."""
        self.drop_buffer()
        with self._store.write(single_statement=True) as tx:
            moved = int(tx.connection.execute(self._sql.unlock_all, {"me": self.identity}).rowcount)
            if moved:
                tx.announce(self.queue_names)
        return moved

    def close(self) -> None:
        self._wake.close()


def in_turns(claimed: list[Any], fair: dict[str, bool]) -> list[Any]:
    """Claimed rows (id, queue, priority, payload, turn, key, headed), sorted by queue then by
    (priority, id), with each fair queue's rows put in the order its claim took them
    (RETURNING has none): by (priority, key, plain first, id)."""
    result: list[Any] = []
    for _, group in groupby(claimed, key=lambda row: row[1]):
        rows = list(group)
        if fair.get(rows[0][1], False):
            rows.sort(key=lambda r: (r[2], _key(r), r[4] is not None, r[0]))
        result += rows
    return result


def _key(row: Any) -> int:
    """The key a row was claimed by; a row promoted by the claim has none: its turn, if any."""
    key = row[5] if row[5] is not None else row[4]
    return 0 if key is None else int(key)


def next_mix(waiting: int | None, current: Mix) -> Mix:
    """What the next claim reads in the fair queues, from the kinds the last one saw waiting
    (``statements._kinds_waiting``): with none waiting, what it read."""
    seen = waiting or 0
    if seen & TAGGED_WAITING and seen & PLAIN_WAITING:
        return "both"
    if seen & TAGGED_WAITING:
        return "tagged"
    if seen & PLAIN_WAITING:
        return "plain"
    return current


def plain_rounds(claimed: list[Any], fair: dict[str, bool]) -> dict[str, int]:
    """The fair queues whose plain share a claim served while tagged jobs waited, and the
    round after the last it was served in."""
    rounds: dict[str, int] = {}
    for row in claimed:
        if fair.get(row[1], False) and row[4] is None and row[6] and row[5] is not None:
            rounds[row[1]] = max(rounds.get(row[1], 0), int(row[5]) + 1)
    return rounds
