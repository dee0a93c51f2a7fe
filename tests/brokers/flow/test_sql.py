"""Flow control in the SQL broker, on SQLite and PostgreSQL: lines and slots on every path a
job ends by, unique holds, rate limits, the sweep, the migration, and pushes racing acks. The
shared suites beside this module (test_concurrency.py, test_rate.py, test_unique.py,
test_tasks.py) check the behaviour through workers; these check the rows."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import delete, func, select

from asynctask import payload
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.reads import BusyKey, Move
from asynctask.brokers.sql import SqlBroker
from asynctask.brokers.sql.flow import digest
from asynctask.brokers.sql.models import Lane, QueuedJob, RateStart, UniqueHold
from asynctask.brokers.sql.push import push_rows
from asynctask.brokers.sql.reads import SqlReader
from asynctask.db.migrate import current, downgrade, head, upgrade
from tests.brokers import test_sql_broker as base
from tests.brokers.test_sql_broker import claim_all

#: Every job made by ``job``, in the order made: rows are listed in it.
MADE: dict[str, int] = {}


def job(klass: str = "Work", queue: str = "default", **fields: Any) -> payload.JobDict:
    made = base.job(klass, queue, **fields)
    MADE[made["jid"]] = len(MADE)
    return made


def rows(broker: SqlBroker) -> list[Any]:
    """Every row, in the order its job was made (promotion renumbers rows)."""
    return sorted(base.rows(broker), key=lambda r: MADE.get(r.jid, len(MADE)))


def keyed(key: str = "k", limit: int = 1, **fields: Any) -> payload.JobDict:
    return job(concurrency_key=key, concurrency_limit=limit, **fields)


def jids(units: list[UnitOfWork]) -> list[str]:
    return [payload.loads(u.payload)["jid"] for u in units]


def test_a_key_runs_its_jobs_one_at_a_time_in_push_order(sql_broker: SqlBroker) -> None:
    pushed = [keyed() for _ in range(3)]
    plain = job("Plain")
    assert sql_broker.push([(j, None) for j in pushed] + [(plain, None)]) == [
        j["jid"] for j in [*pushed, plain]
    ]
    assert [(r.state, r.holds) for r in rows(sql_broker)] == [
        ("queued", True),
        ("lane", False),
        ("lane", False),
        ("queued", False),
    ]
    fetcher = sql_broker.fetcher("me")
    fetcher.register()
    first = claim_all(fetcher)
    # The waiting keyed jobs block nothing: the unkeyed job behind them is claimed.
    assert jids(first) == [pushed[0]["jid"], plain["jid"]]
    assert claim_all(fetcher) == []
    # The ack frees the slot and, in the same claim, the next job is promoted and claimed.
    second = fetcher.claim(10, first, [])
    assert jids(second) == [pushed[1]["jid"]]
    third = fetcher.claim(10, second, [])
    assert jids(third) == [pushed[2]["jid"]]
    fetcher.settle(third, [])
    assert rows(sql_broker) == []


def test_a_promoted_job_is_claimed_at_once_unless_a_more_urgent_job_waits(sql_broker: SqlBroker) -> None:
    first, second, third = (keyed(priority=5) for _ in range(3))
    sql_broker.push([(first, None), (second, None), (third, None)])
    fetcher = sql_broker.fetcher("me")
    fetcher.register()
    [unit] = claim_all(fetcher)
    # Nothing else waits: the ack promotes the key's next job and the same claim takes it.
    [unit] = fetcher.claim(1, [unit], [])
    assert jids([unit]) == [second["jid"]]
    urgent = job("Urgent", priority=0)
    sql_broker.push([(urgent, None)])
    # A more urgent job waits in the queue: it is claimed, and the promoted job waits its turn.
    assert jids(fetcher.claim(1, [unit], [])) == [urgent["jid"]]
    assert jids(claim_all(fetcher)) == [third["jid"]]


def test_a_limit_of_two_keeps_two_holders_and_the_latest_push_sets_the_limit(sql_broker: SqlBroker) -> None:
    sql_broker.push([(keyed(limit=2), None) for _ in range(4)])
    assert [r.state for r in rows(sql_broker)] == ["queued", "queued", "lane", "lane"]
    sql_broker.push([(keyed(limit=3), None)])
    with sql_broker.engine.connect() as connection:
        assert connection.scalar(select(Lane.lim).where(Lane.digest == digest("k"))) == 3
    # The new limit frees one more slot for the line's head, not the job just pushed.
    assert [r.state for r in rows(sql_broker)] == ["queued", "queued", "queued", "lane", "lane"]


@pytest.mark.parametrize(
    ("on_failure", "retrying", "requeued", "order"),
    [
        pytest.param(
            {},
            [("retry", True), ("lane", False)],
            [("queued", True), ("lane", False)],
            [0, 1],
            id="on_hold_it_keeps_its_slot_and_comes_back_straight_to_its_queue",
        ),
        pytest.param(
            {"concurrency_on_failure": "continue"},
            [("retry", False), ("queued", True)],
            [("lane", False), ("queued", True)],
            [1, 0],
            id="one_that_continues_frees_its_slot_and_reenters_the_line",
        ),
    ],
)
def test_a_failed_keyed_job(
    sql_broker: SqlBroker,
    on_failure: dict[str, str],
    retrying: list[tuple[str, bool]],
    requeued: list[tuple[str, bool]],
    order: list[int],
) -> None:
    """(state, holds) of the failed job and the one behind it while it waits for its retry and
    once the retry is due, then which of the two runs first."""
    pushed = [keyed(**on_failure), keyed()]
    sql_broker.push([(j, None) for j in pushed])
    fetcher = sql_broker.fetcher("me")
    [unit] = claim_all(fetcher)
    sql_broker.retry_at(unit, payload.loads(unit.payload) | {"retry_count": 0}, payload.now() - 1)
    assert [(r.state, r.holds) for r in rows(sql_broker)] == retrying
    assert sql_broker.enqueue_due("retry", payload.loads) == 1
    assert [(r.state, r.holds) for r in rows(sql_broker)] == requeued
    [running] = claim_all(fetcher)
    assert jids([running]) == [pushed[order[0]]["jid"]]
    assert jids(fetcher.claim(10, [running], [])) == [pushed[order[1]]["jid"]]


def test_kill_and_release_free_the_slot(sql_broker: SqlBroker) -> None:
    pushed = [keyed() for _ in range(3)]
    sql_broker.push([(j, None) for j in pushed])
    fetcher = sql_broker.fetcher("me")
    [unit] = claim_all(fetcher)
    sql_broker.kill(unit, unit.payload.decode())
    assert [(r.state, r.holds) for r in rows(sql_broker)] == [
        ("dead", False),
        ("queued", True),
        ("lane", False),
    ]
    [unit] = claim_all(fetcher)
    sql_broker.release(unit)
    assert [(r.state, r.holds) for r in rows(sql_broker)] == [("dead", False), ("queued", True)]


def test_a_scheduled_keyed_job_enters_its_line_when_due(sql_broker: SqlBroker) -> None:
    running, later = keyed(), keyed()
    sql_broker.push([(running, None), (later, payload.now() + 0.05)])
    assert [(r.state, r.holds) for r in rows(sql_broker)] == [("queued", True), ("scheduled", False)]
    while sql_broker.enqueue_due("schedule", payload.loads) == 0:
        pass
    assert [(r.state, r.holds) for r in rows(sql_broker)] == [("queued", True), ("lane", False)]


def test_given_back_and_recovered_jobs_keep_their_slots(make_sql_broker: Callable[..., SqlBroker]) -> None:
    broker = make_sql_broker()
    broker.push([(keyed(), None), (keyed(), None)])
    fetcher = broker.fetcher("gone")
    claim_all(fetcher)
    assert fetcher.requeue_all(forget=False) == 1
    assert [(r.state, r.holds, r.locked_by) for r in rows(broker)] == [
        ("queued", True, None),
        ("lane", False, None),
    ]
    claim_all(fetcher)
    # "gone" never registered: recovery takes its claim back, still holding the slot.
    assert broker.recover_orphans("me") == 1
    assert [(r.state, r.holds, r.locked_by) for r in rows(broker)] == [
        ("queued", True, None),
        ("lane", False, None),
    ]


def test_the_sweep_promotes_from_a_line_whose_holder_was_deleted_by_hand(sql_broker: SqlBroker) -> None:
    sql_broker.push([(keyed(), None), (keyed(), None)])
    with sql_broker.engine.begin() as connection:
        connection.execute(delete(QueuedJob).where(QueuedJob.holds))
    assert [(r.state, r.holds) for r in rows(sql_broker)] == [("lane", False)]
    assert sql_broker.sweep() == 1
    assert [(r.state, r.holds) for r in rows(sql_broker)] == [("queued", True)]
    assert sql_broker.sweep() == 0


def test_a_unique_job_is_pushed_once_until_it_ends(sql_broker: SqlBroker) -> None:
    first = job(unique_key="u", unique_for=60)
    second = job(unique_key="u", unique_for=60)
    other = job(unique_key="v", unique_for=60)
    assert sql_broker.push([(first, None), (second, None), (other, None)]) == [
        first["jid"],
        first["jid"],
        other["jid"],
    ]
    assert sql_broker.push([(job(unique_key="u", unique_for=60), None)]) == [first["jid"]]
    assert [r.jid for r in rows(sql_broker)] == [first["jid"], other["jid"]]
    fetcher = sql_broker.fetcher("me")
    units = claim_all(fetcher)
    # Held while running ("done" is the default), and through a retry.
    assert sql_broker.push([(job(unique_key="u", unique_for=60), None)]) == [first["jid"]]
    sql_broker.retry_at(units[0], payload.loads(units[0].payload) | {"retry_count": 0}, payload.now() - 1)
    assert sql_broker.push([(job(unique_key="u", unique_for=60), None)]) == [first["jid"]]
    sql_broker.enqueue_due("retry", payload.loads)
    [unit] = claim_all(fetcher)
    fetcher.settle([unit, units[1]], [])
    third = job(unique_key="u", unique_for=60)
    assert sql_broker.push([(third, None)]) == [third["jid"]]


def test_a_unique_job_until_start_is_released_by_its_claim(sql_broker: SqlBroker) -> None:
    first = job(unique_key="u", unique_for=60, unique_until="start")
    sql_broker.push([(first, None)])
    assert sql_broker.push([(job(unique_key="u", unique_for=60), None)]) == [first["jid"]]
    claim_all(sql_broker.fetcher("me"))
    second = job(unique_key="u", unique_for=60)
    assert sql_broker.push([(second, None)]) == [second["jid"]]


def test_a_unique_hold_expires_and_an_old_holder_never_releases_a_new_one(sql_broker: SqlBroker) -> None:
    first = job(unique_key="u", unique_for=0.05)
    sql_broker.push([(first, None)])
    [unit] = claim_all(sql_broker.fetcher("me"))
    deadline = payload.now() + 5
    second = job(unique_key="u", unique_for=60)
    while sql_broker.push([(second, None)]) != [second["jid"]]:
        assert payload.now() < deadline
    sql_broker.release(unit)
    with sql_broker.engine.connect() as connection:
        assert connection.scalar(select(UniqueHold.jid)) == second["jid"]


def test_jobs_over_their_rate_go_back_to_the_schedule_spread_out(sql_broker: SqlBroker) -> None:
    pushed = [job(rate_limit="2/s", rate_key="api") for _ in range(5)]
    sql_broker.push([(j, None) for j in pushed])
    before = payload.now()
    units = claim_all(sql_broker.fetcher("me"))
    assert jids(units) == [j["jid"] for j in pushed[:2]]
    postponed = [r for r in rows(sql_broker) if r.state == "scheduled"]
    assert [(r.jid, r.attempts, r.locked_by) for r in postponed] == [(j["jid"], 0, None) for j in pushed[2:]]
    dues = [r.run_at - before for r in postponed]
    # The window frees a start about 1 s after the first ones; the next are 0.5 s apart.
    assert 0.9 < dues[0] < 1.1
    assert [round(b - a, 3) for a, b in itertools.pairwise(dues)] == [0.5, 0.5]
    with sql_broker.engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(RateStart)) == 2


def test_staged_jobs_go_through_lines_and_unique_keys(sql_broker: SqlBroker) -> None:
    staging = sql_broker.staging("task")
    jobs = [keyed(), keyed(), job(unique_key="u", unique_for=60), job(unique_key="u", unique_for=60)]
    with sql_broker.engine.begin() as connection:
        staging.write(staging.encode(jobs), connection)
    assert staging.publish() == 3
    assert [(r.state, r.holds) for r in rows(sql_broker)] == [
        ("queued", True),
        ("lane", False),
        ("queued", False),
    ]


def test_the_migration_goes_down_and_up_again(sql_url: str, sql_broker: SqlBroker) -> None:
    sql_broker.push([(job(), None)])
    downgrade(sql_url, "0003")
    assert current(sql_url) == "0003"
    upgrade(sql_url)
    assert current(sql_url) == head()
    assert [(r.state, r.lane, r.holds) for r in rows(sql_broker)] == [("queued", None, False)]


def test_pushes_racing_acks_never_exceed_the_limit_nor_stall_a_line(
    make_sql_broker: Callable[..., SqlBroker],
) -> None:
    """Threads push keyed jobs while others claim and acknowledge them: every job runs, a key
    never has more running than its limit, and no line is left waiting."""
    pushers, per_pusher, keys = 3, 40, ["a", "b", "c"]
    broker = make_sql_broker(concurrency=8)
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    seen: list[str] = []
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def push(n: int) -> None:
        try:
            for i in range(per_pusher):
                broker.push([(keyed(keys[(n + i) % 3], limit=2), None)])
        except BaseException as exc:
            errors.append(exc)

    def work(name: str) -> None:
        fetcher = broker.fetcher(name)
        fetcher.register()
        acks: list[UnitOfWork] = []
        try:
            while True:
                with lock:
                    # Ended before the claim acknowledges them: the count never runs behind.
                    running.subtract(key_of(u) for u in acks)
                # Read before the claim: a push's job can be claimed from its push's time on,
                # which may be later than a claim that began before the push committed.
                pushed_all = done.is_set()
                units = fetcher.claim(2, acks, [])
                with lock:
                    for u in units:
                        running[key_of(u)] += 1
                        peak[key_of(u)] = max(peak[key_of(u)], running[key_of(u)])
                        seen.append(jids([u])[0])
                if not units and not acks and pushed_all:
                    return
                acks = units
        except BaseException as exc:
            errors.append(exc)

    def watch() -> None:
        # The stored invariant itself: never more slot holders than the limit.
        query = select(QueuedJob.lane, func.count()).where(QueuedJob.holds).group_by(QueuedJob.lane)
        try:
            while not done.is_set():
                with broker.engine.connect() as connection:
                    holders.extend(n for _, n in connection.execute(query))
        except BaseException as exc:
            errors.append(exc)

    holders: list[int] = []
    threads = [threading.Thread(target=push, args=(n,)) for n in range(pushers)]
    workers = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(3)]
    workers.append(threading.Thread(target=watch))
    for t in threads + workers:
        t.start()
    for t in threads:
        t.join(60)
    done.set()
    for t in workers:
        t.join(60)
    assert not errors
    assert len(seen) == len(set(seen)) == pushers * per_pusher
    assert max(peak.values()) <= 2
    assert holders and max(holders) <= 2
    assert rows(broker) == []


def key_of(unit: UnitOfWork) -> str:
    return str(payload.loads(unit.payload)["concurrency_key"])


def test_read_api_removals_free_slots_and_a_dead_job_retried_goes_through_its_line(
    sql_broker: SqlBroker,
) -> None:
    reader = SqlReader(sql_broker.engine, sql_broker.settings)
    pushed = [keyed(unique_key=f"u{n}", unique_for=60) for n in range(4)]
    sql_broker.push([(j, None) for j in pushed])
    [head] = list(reader.queue_rows("default", 10))
    assert reader.queue_delete("default", head)
    assert [(r.jid, r.state) for r in rows(sql_broker)] == [
        (j["jid"], s) for j, s in zip(pushed[1:], ["queued", "lane", "lane"], strict=True)
    ]
    # Its unique key went with it.
    assert sql_broker.push([(job(queue="other", unique_key="u0", unique_for=60), None)]) != [pushed[0]["jid"]]
    fetcher = sql_broker.fetcher("me")
    [unit] = claim_all(fetcher)
    sql_broker.retry_at(unit, payload.loads(unit.payload) | {"retry_count": 0}, payload.now() + 60)
    [entry] = reader.set_rows("retry", 10)
    assert reader.set_kill("retry", [entry], payload.now()) == 1
    assert [(r.jid, r.state, r.holds) for r in rows(sql_broker) if r.lane] == [
        (pushed[1]["jid"], "dead", False),
        (pushed[2]["jid"], "queued", True),
        (pushed[3]["jid"], "lane", False),
    ]
    [busy] = reader.busy_keys(10)
    assert busy == BusyKey(key="k", limit=1, holders=[pushed[2]["jid"]], waiting=1)
    [dead] = reader.set_rows("dead", 10)
    move = Move(dead, dead.raw.decode(), "default")
    assert reader.set_enqueue("dead", [move], payload.now()) == 1
    # Retried by hand, the dead job waits behind the line it left.
    assert [(r.jid, r.state) for r in rows(sql_broker) if r.lane] == [
        (pushed[1]["jid"], "lane"),
        (pushed[2]["jid"], "queued"),
        (pushed[3]["jid"], "lane"),
    ]
    assert reader.busy_keys(10)[0].waiting == 2
    assert reader.queue_clear("default") == 1
    assert [(r.jid, r.state) for r in rows(sql_broker) if r.lane] == [
        (pushed[1]["jid"], "lane"),
        (pushed[3]["jid"], "queued"),
    ]


def test_a_retry_whose_row_was_taken_back_holds_no_slot(sql_broker: SqlBroker) -> None:
    first = keyed()
    sql_broker.push([(first, None)])
    [unit] = claim_all(sql_broker.fetcher("me"))
    with sql_broker.engine.begin() as connection:
        connection.execute(delete(QueuedJob))
    sql_broker.retry_at(unit, payload.loads(unit.payload) | {"retry_count": 0}, payload.now() - 1)
    assert [(r.state, r.holds) for r in rows(sql_broker)] == [("retry", False)]
    sql_broker.enqueue_due("retry", payload.loads)
    assert [(r.state, r.holds) for r in rows(sql_broker)] == [("queued", True)]


def test_threads_pushing_one_unique_key_store_one_job_and_all_get_its_jid(
    make_sql_broker: Callable[..., SqlBroker],
) -> None:
    broker = make_sql_broker(concurrency=8)
    start = threading.Barrier(6)
    returned: list[str] = []
    errors: list[BaseException] = []

    def push() -> None:
        try:
            start.wait(10)
            for _ in range(10):
                returned.extend(broker.push([(job(unique_key="once", unique_for=60), None)]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=push) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    [stored] = rows(broker)
    assert set(returned) == {stored.jid}


def test_a_lowered_limit_promotes_nobody_until_the_holders_are_below_it(sql_broker: SqlBroker) -> None:
    sql_broker.push([(keyed(limit=3), None) for _ in range(3)])
    sql_broker.push([(keyed(limit=1), None) for _ in range(2)])
    fetcher = sql_broker.fetcher("me")
    units = claim_all(fetcher)
    assert len(units) == 3
    assert fetcher.claim(10, units[:1], []) == []
    assert fetcher.claim(10, units[1:2], []) == []
    assert len(fetcher.claim(10, units[2:], [])) == 1


def test_an_ack_waits_for_a_push_into_its_line_and_then_promotes_it(sql_broker: SqlBroker) -> None:
    """The race a key's lock closes: a push that found the slot taken, not yet committed, and
    the holder's ack. Without the ack taking the key's lock first, the ack's promotion would
    not see the pushed row and the line would wait for ever."""
    sql_broker.push([(keyed(), None)])
    fetcher = sql_broker.fetcher("me")
    [holder] = claim_all(fetcher)
    late = keyed()
    acked = threading.Event()

    def settle() -> None:
        fetcher.settle([holder], [])
        acked.set()

    with sql_broker.store.write() as tx:
        [row] = push_rows([(late, None)], 10_000)
        _, kept, _ = sql_broker.flow.admit(tx.connection, [(late, row)], payload.now())
        sql_broker.store.insert_jobs(tx.connection, kept)
        assert kept[0][2] == "lane"
        ack = threading.Thread(target=settle)
        ack.start()
        # The ack waits for the push's lock (PostgreSQL) or write lock (SQLite).
        assert not acked.wait(0.5)
    ack.join(10)
    assert acked.is_set()
    assert [(r.jid, r.state, r.holds) for r in rows(sql_broker)] == [(late["jid"], "queued", True)]


def lane_keys(broker: SqlBroker) -> list[str]:
    with broker.engine.connect() as connection:
        return sorted(connection.scalars(select(Lane.key)))


def test_the_sweep_forgets_idle_keys_and_a_job_coming_back_recreates_its_key(sql_broker: SqlBroker) -> None:
    reader = SqlReader(sql_broker.engine, sql_broker.settings)
    sql_broker.push([(keyed("busy"), None), (keyed("idle"), None), (keyed("dies"), None)])
    fetcher = sql_broker.fetcher("me")
    units = {key_of(u): u for u in claim_all(fetcher)}
    fetcher.settle([units["idle"]], [])
    sql_broker.kill(units["dies"], units["dies"].payload.decode())
    sql_broker.sweep()
    assert lane_keys(sql_broker) == ["busy"]
    # The dead job retried by hand recreates its key, takes its slot and runs.
    [dead] = reader.set_rows("dead", 10)
    assert reader.set_enqueue("dead", [Move(dead, dead.raw.decode(), "default")], payload.now()) == 1
    assert lane_keys(sql_broker) == ["busy", "dies"]
    assert [key_of(u) for u in claim_all(fetcher)] == ["dies"]
