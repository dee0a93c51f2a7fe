"""Fair share in the SQL broker, on SQLite and PostgreSQL (docs/internals/fair-share-sql.md):
the turns a task's rows are tagged with, the order the claims take them in, and the plans of
the fair claim."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select, text, update

from asynctask import payload
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.sql import SqlBroker
from asynctask.brokers.sql.fetch import SqlFetcher
from asynctask.brokers.sql.models import Share
from asynctask.brokers.sql.predicates import Mix
from asynctask.fairness import share_of
from asynctask.feeds import Feed
from asynctask.settings import QueueSpec
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import status
from tests.brokers.test_sql_broker import classes, job, rows


def stage(
    broker: SqlBroker,
    task: str,
    count: int,
    *,
    tenant: str | None = None,
    feed: Feed | None = None,
    batches: int = 1,
    queue: str = "default",
    **fields: Any,
) -> None:
    """Publish a task of ``count`` jobs named ``<task><n>``, as create_task does: written in
    ``batches`` through one transaction, then published."""
    jobs = [job(f"{task}{n}", queue=queue, task=task, **fields) for n in range(count)]
    if feed is not None:
        for j in jobs:
            j["feed"] = task
    staging = broker.staging(task, feed, share_of(task, tenant))
    size = -(-count // batches)
    with broker.engine.begin() as connection:
        for start in range(0, count, size):
            staging.write(staging.encode(jobs[start : start + size]), connection)
    assert staging.publish() == count


def plain(broker: SqlBroker, name: str, count: int, queue: str = "default", **fields: Any) -> None:
    broker.push([(job(f"{name}{n}", queue=queue, **fields), None) for n in range(count)])


def turns(broker: SqlBroker) -> dict[str, int | None]:
    return {payload.loads(r.payload)["class"]: r.turn for r in rows(broker)}


def one_by_one(fetcher: SqlFetcher) -> list[str]:
    """The claim order of the statement itself: one job per claim, until none is left."""
    taken: list[str] = []
    while units := fetcher.claim(1, [], []):
        taken += classes(units)
    return taken


def reads(fetcher: SqlFetcher) -> Mix:
    """The kinds of rows the fetcher's next claim reads (a call: each one reads it anew)."""
    return fetcher.mix


def fetcher_of(broker: SqlBroker, name: str = "me") -> SqlFetcher:
    fetcher = broker.fetcher(name)
    fetcher.register()
    return fetcher


def test_the_tasks_of_two_tenants_interleave(sql_broker: SqlBroker) -> None:
    stage(sql_broker, "A", 3, tenant="a")
    stage(sql_broker, "B", 2, tenant="b")
    assert turns(sql_broker) == {"A0": 0, "A1": 1, "A2": 2, "B0": 0, "B1": 1}
    assert one_by_one(fetcher_of(sql_broker)) == ["A0", "B0", "A1", "B1", "A2"]


def test_a_tenants_second_task_goes_after_its_first(sql_broker: SqlBroker) -> None:
    stage(sql_broker, "A", 3, tenant="a")
    stage(sql_broker, "C", 2, tenant="a")
    stage(sql_broker, "B", 2, tenant="b")
    assert turns(sql_broker) == {"A0": 0, "A1": 1, "A2": 2, "C0": 3, "C1": 4, "B0": 0, "B1": 1}
    with sql_broker.engine.connect() as connection:
        shares = {(s.queue, s.share, s.last_turn) for s in connection.execute(select(Share))}
    assert shares == {("default", "tenant:a", 5), ("default", "tenant:b", 2)}
    assert one_by_one(fetcher_of(sql_broker)) == ["A0", "B0", "A1", "B1", "A2", "C0", "C1"]


def test_a_tenants_turns_go_past_a_small_integer(sql_broker: SqlBroker) -> None:
    # PostgreSQL once added the parameters as the smallints psycopg sent them as: 40,000 overflowed.
    stage(sql_broker, "A", 3, tenant="a")
    with sql_broker.engine.begin() as connection:
        connection.execute(update(Share).values(last_turn=32_000))
    fetcher = fetcher_of(sql_broker)
    assert classes(fetcher.claim(3, [], [])) == ["A0", "A1", "A2"]
    stage(sql_broker, "C", 8_000, tenant="a")
    with sql_broker.engine.connect() as connection:
        assert connection.execute(select(Share.last_turn)).scalar_one() == 40_000


def test_a_task_without_tenant_starts_at_the_head_and_keeps_no_row(sql_broker: SqlBroker) -> None:
    stage(sql_broker, "A", 4, tenant="a")
    fetcher = fetcher_of(sql_broker)
    assert classes(fetcher.claim(2, [], [])) == ["A0", "A1"]
    stage(sql_broker, "X", 2)
    stage(sql_broker, "Y", 2)
    assert {k: v for k, v in turns(sql_broker).items() if k[0] in "XY"} == {
        "X0": 2,
        "X1": 3,
        "Y0": 2,
        "Y1": 3,
    }
    with sql_broker.engine.connect() as connection:
        assert [s.share for s in connection.execute(select(Share))] == ["tenant:a"]
    assert one_by_one(fetcher) == ["A2", "X0", "Y0", "A3", "X1", "Y1"]


def two_tenants_and_plain_jobs(broker: SqlBroker) -> list[str]:
    """Stage the rotation of two tenants' tasks and plain jobs; return its order."""
    stage(broker, "A", 3, tenant="a")
    plain(broker, "P", 3)
    stage(broker, "B", 3, tenant="b")
    assert turns(broker)["P0"] is None
    return ["P0", "A0", "B0", "P1", "A1", "B1", "P2", "A2", "B2"]


def test_plain_jobs_take_one_turn_per_round(sql_broker: SqlBroker) -> None:
    """One job per claim: the plain share's round is what keeps it from taking every claim
    while the head's round is served."""
    rotation = two_tenants_and_plain_jobs(sql_broker)
    assert one_by_one(fetcher_of(sql_broker)) == rotation


def test_a_batch_claim_takes_and_hands_out_the_rotation(sql_broker: SqlBroker) -> None:
    rotation = two_tenants_and_plain_jobs(sql_broker)
    fetcher = fetcher_of(sql_broker)
    assert classes(fetcher.claim(5, [], [])) == rotation[:5]
    assert classes(fetcher.claim(4, [], [])) == rotation[5:]


def test_plain_jobs_alone_are_claimed_in_push_order(sql_broker: SqlBroker) -> None:
    plain(sql_broker, "P", 3)
    plain(sql_broker, "Q", 1, priority=-1)
    fetcher = fetcher_of(sql_broker)
    assert classes(fetcher.claim(2, [], [])) == ["Q0", "P0"]
    assert one_by_one(fetcher) == ["P1", "P2"]


def claim_order(broker: SqlBroker, count: int) -> list[str]:
    """The classes one claim of ``count`` jobs takes, in order; claimed again one at a time once
    they are given back, they come in the same order."""
    fetcher = fetcher_of(broker)
    units = fetcher.claim(count, [], [])
    fetcher.requeue(units)
    assert one_by_one(fetcher) == classes(units)
    return classes(units)


def test_priority_beats_fairness(sql_broker: SqlBroker) -> None:
    stage(sql_broker, "A", 2, tenant="a", priority=5)
    stage(sql_broker, "B", 2, tenant="b")
    plain(sql_broker, "P", 2, priority=1)
    plain(sql_broker, "Q", 1, priority=-1)
    assert claim_order(sql_broker, 7) == ["Q0", "B0", "B1", "P0", "P1", "A0", "A1"]


@pytest.mark.parametrize(
    "fifo", [{"queues": (QueueSpec("default", fair=False),)}, {"fifo_queues": ("default",)}]
)
def test_a_fifo_queue_is_claimed_by_priority_then_push_order(
    make_sql_broker: Callable[..., SqlBroker], fifo: dict[str, Any]
) -> None:
    broker = make_sql_broker(**fifo)
    stage(broker, "A", 3, tenant="a")
    plain(broker, "P", 1)
    stage(broker, "B", 2, tenant="b")
    plain(broker, "Q", 1, priority=-1)
    assert turns(broker)["B0"] == 0
    assert claim_order(broker, 7) == ["Q0", "A0", "A1", "A2", "P0", "B0", "B1"]


def test_fair_and_fifo_queues_in_one_claim(make_sql_broker: Callable[..., SqlBroker]) -> None:
    broker = make_sql_broker(queues=(QueueSpec("f"), QueueSpec("o", fair=False)))
    for queue in "of":
        stage(broker, f"{queue.upper()}A", 2, tenant="a", queue=queue)
        stage(broker, f"{queue.upper()}B", 2, tenant="b", queue=queue)
    assert claim_order(broker, 8) == ["FA0", "FB0", "FA1", "FB1", "OA0", "OA1", "OB0", "OB1"]


def test_turns_never_go_back_after_the_queue_drains(sql_broker: SqlBroker) -> None:
    """A tenant whose old jobs all ran is not put behind a newcomer: the newcomer starts after
    the last turn reached, not at 0 again."""
    stage(sql_broker, "A", 3, tenant="a")
    fetcher = fetcher_of(sql_broker)
    done = fetcher.claim(3, [], [])
    assert fetcher.claim(3, done, []) == [] and rows(sql_broker) == []
    stage(sql_broker, "B", 3, tenant="b")
    stage(sql_broker, "C", 3, tenant="a")
    assert [turns(sql_broker)[k] for k in ("B0", "C0")] == [3, 3]
    assert one_by_one(fetcher) == ["B0", "C0", "B1", "C1", "B2", "C2"]


def test_batches_held_and_keyed_rows_are_tagged_and_keep_their_turns(sql_broker: SqlBroker) -> None:
    stage(sql_broker, "A", 4, tenant="a", batches=2)
    stage(sql_broker, "F", 3, tenant="f", feed=Feed(parallel=1), batches=2)
    stage(sql_broker, "K", 2, concurrency_key="k", concurrency_limit=1)
    stage(sql_broker, "X", 4, batches=2)
    found = {payload.loads(r.payload)["class"]: (r.state, r.turn) for r in rows(sql_broker)}
    assert {k: v for k, v in found.items() if k[0] == "X"} == {f"X{n}": ("queued", n) for n in range(4)}
    assert {k: v for k, v in found.items() if k[0] != "X"} == {
        "A0": ("queued", 0),
        "A1": ("queued", 1),
        "A2": ("queued", 2),
        "A3": ("queued", 3),
        "F0": ("queued", 0),
        "F1": ("held", 1),
        "F2": ("held", 2),
        "K0": ("queued", 0),
        "K1": ("lane", 1),
    }
    fetcher = fetcher_of(sql_broker)
    units = fetcher.claim(3, [], [])
    assert classes(units) == ["A0", "F0", "K0"]
    # A retry goes back with its turn, and a requeued job keeps it.
    first = units[0]
    sql_broker.retry_at(first, payload.loads(first.payload) | {"retry_count": 0}, payload.now() - 1)
    assert sql_broker.enqueue_due("retry", payload.loads) == 1
    fetcher.requeue(units[1:2])
    assert turns(sql_broker)["A0"] == 0 and turns(sql_broker)["F0"] == 0
    # K0's end promotes K1 from its line, F0's releases F1: both with their turns.
    [f0] = [u for u in fetcher.claim(10, [units[2]], []) if classes([u]) == ["F0"]]
    fetcher.claim(1, [f0], [])
    found = {payload.loads(r.payload)["class"]: (r.state, r.turn) for r in rows(sql_broker)}
    assert (found["K1"], found["F1"]) == (("queued", 1), ("queued", 1))


def test_a_pushed_job_of_a_task_is_plain(sql_broker: SqlBroker) -> None:
    sql_broker.push([(job("T0", task="T"), None)])
    assert turns(sql_broker) == {"T0": None}


def test_concurrent_claimers_never_claim_one_row_twice(
    make_sql_broker: Callable[..., SqlBroker], database_url: str
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite's write lock serialises claimers")
    broker = make_sql_broker(concurrency=8)
    for n in range(6):
        stage(broker, f"T{n}-", 50, tenant=f"t{n % 3}")
    plain(broker, "P", 100)
    claimed: Counter[int] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(name: str) -> None:
        fetcher = fetcher_of(broker, name)
        acks: list[UnitOfWork] = []
        try:
            while True:
                units = fetcher.claim(3, acks, [])
                if not units:
                    return
                with lock:
                    claimed.update(int(u.ref) for u in units)
                acks = units
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len(claimed) == 400 and set(claimed.values()) == {1}


def explain(broker: SqlBroker, fifo: bool = False, mix: Mix = "both") -> str:
    """The plan of the claim of one fair (or fifo) queue, over enough rows of both kinds that
    an index beats a scan."""
    statements = broker.store.sql
    statement = statements.claim((not fifo,), 5, mix)
    params: dict[str, Any] = {"ids": statements.ids([]), "me": "me", "now": 0.0, "wanted": 5}
    if statements.postgres:
        params["queues"] = ["default"]
    else:
        params["q0"] = "default"
    with broker.engine.begin() as connection:
        if statements.postgres:
            connection.execute(text("ANALYZE asynctask_job"))
            return "\n".join(connection.execute(text(f"EXPLAIN {statement.text}"), params).scalars())
        found = connection.execute(text(f"EXPLAIN QUERY PLAN {statement.text}"), params).all()
        return "\n".join(str(row[-1]) for row in found)


def test_the_fair_claim_reads_the_heads_of_its_indexes(sql_broker: SqlBroker) -> None:
    for n in range(20):
        stage(sql_broker, f"T{n}-", 100, tenant=f"t{n}")
    plain(sql_broker, "P", 2000)
    plan = explain(sql_broker)
    assert "ix_asynctask_job_turn" in plan and "ix_asynctask_job_plain" in plan, plan
    assert "ix_asynctask_job_fetch" not in plan, plan
    # A scan of every waiting row would show as a sequential scan or a scan of the table.
    assert "Seq Scan on asynctask_job" not in plan, plan
    assert not re.search(r"SCAN asynctask_job(?! USING)", plan), plan
    fifo = explain(sql_broker, fifo=True)
    assert "ix_asynctask_job_fetch" in fifo and "ix_asynctask_job_turn" not in fifo, fifo
    if sql_broker.store.sql.postgres:
        # The claims that read one kind look for the other at the head of its index.
        for mix in ("tagged", "plain"):
            one_kind = explain(sql_broker, mix=mix)
            assert "ix_asynctask_job_turn" in one_kind and "ix_asynctask_job_plain" in one_kind, one_kind
            assert "Seq Scan on asynctask_job" not in one_kind, one_kind
            assert "ix_asynctask_job_fetch" not in one_kind, one_kind


def pipelines_asked(broker: SqlBroker, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Record, from now on, each pipelined run of the broker's store: ``alone`` (a transaction
    of its own) or ``within`` one, and whether it asked for the plan without sorts."""
    asked: list[tuple[str, bool]] = []
    pipelined, within = broker.store.pipelined, broker.store.pipelined_within

    def alone(steps: Any, *, index_order: bool = False) -> list[tuple[Any, ...]]:
        asked.append(("alone", index_order))
        return pipelined(steps, index_order=index_order)

    def inside(connection: Any, steps: Any, *, index_order: bool) -> list[tuple[Any, ...]]:
        asked.append(("within", index_order))
        return within(connection, steps, index_order=index_order)

    monkeypatch.setattr(broker.store, "pipelined", alone)
    monkeypatch.setattr(broker.store, "pipelined_within", inside)
    return asked


def test_a_fair_claim_reads_its_index_in_order_on_a_table_without_statistics(
    sql_broker: SqlBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue of 40,000 jobs that was never analyzed: left to the planner, PostgreSQL 15 read
    the tagged rows from the fetch index and sorted them all at every claim (a claim of 10 jobs
    cost as much as the queue was long). The claim is planned without sorts, and the fetcher
    asks for that for every claim of a fair queue."""
    if not sql_broker.store.sql.postgres:
        pytest.skip("SQLite has no generic plans; its claim plans are checked above")
    stage(sql_broker, "A", 40_000, batches=8)
    statements = sql_broker.store.sql
    claim = statements.claim((True,), 10, "tagged")
    params = {"ids": statements.ids([]), "me": "me", "now": 0.0, "queues": ["default"]}
    found = sql_broker.store.pipelined([(text(f"EXPLAIN {claim.text}"), params)], index_order=True)
    plan = "\n".join(str(row[0]) for row in found)
    assert "ix_asynctask_job_turn" in plan and "ix_asynctask_job_fetch" not in plan, plan

    asked = pipelines_asked(sql_broker, monkeypatch)
    fetcher = fetcher_of(sql_broker)
    assert classes(fetcher.claim(2, [], [])) == ["A0", "A1"]
    assert asked == [("alone", True)]

    # A claim that writes tracking rows runs in a transaction of its own, the claim with its settings.
    asked.clear()
    claimed = fetcher.claim(1, [], [status("A2-jid", EventStatus.WORKING).encode()])
    assert classes(claimed) == ["A2"]
    assert asked == [("within", True)]


def test_a_fair_claim_that_ends_keyed_jobs_is_planned_without_sorts(
    sql_broker: SqlBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim that acknowledges keyed jobs (and promotes the next of their keys) asks for the
    plan without sorts too."""
    if not sql_broker.store.sql.postgres:
        pytest.skip("SQLite has no generic plans; its claim plans are checked above")
    stage(sql_broker, "K", 3, concurrency_key="k", concurrency_limit=1)
    fetcher = fetcher_of(sql_broker)
    first = fetcher.claim(1, [], [])
    assert classes(first) == ["K0"]
    asked = pipelines_asked(sql_broker, monkeypatch)
    assert classes(fetcher.claim(1, first, [])) == ["K1"]
    assert asked == [("alone", True)]


def plain_jobs_after_a_tagged_claim(sql_broker: SqlBroker, tagged: int, plain_jobs: int) -> SqlFetcher:
    """A fetcher whose claim took the first of task A's ``tagged`` jobs, reading the tagged rows
    alone (no plain job waited); then ``plain_jobs`` plain jobs are pushed."""
    stage(sql_broker, "A", tagged, tenant="a")
    fetcher = fetcher_of(sql_broker)
    assert classes(fetcher.claim(1, [], [])) == ["A0"]
    assert reads(fetcher) == "tagged"
    plain(sql_broker, "P", plain_jobs)
    return fetcher


def test_a_claim_reads_the_kinds_the_claim_before_saw_waiting(sql_broker: SqlBroker) -> None:
    """A queue of tasks alone, or of plain jobs alone, is claimed by one index read, as a FIFO
    queue is; a job of the other kind that comes is read by the next claim."""
    if not sql_broker.store.sql.postgres:
        pytest.skip("SQLite's claim reads both kinds: its write lock costs more than the read")
    fetcher = plain_jobs_after_a_tagged_claim(sql_broker, tagged=4, plain_jobs=2)
    # Read as the claim before saw the queue; it sees the plain jobs waiting.
    assert classes(fetcher.claim(1, [], [])) == ["A1"]
    assert reads(fetcher) == "both"
    assert one_by_one(fetcher) == ["P0", "A2", "P1", "A3"]


def test_a_claim_that_read_none_of_the_kind_waiting_reads_it_at_once(sql_broker: SqlBroker) -> None:
    if not sql_broker.store.sql.postgres:
        pytest.skip("SQLite's claim reads both kinds")
    fetcher = plain_jobs_after_a_tagged_claim(sql_broker, tagged=1, plain_jobs=1)
    # No tagged row is left: the same call claims again, reading the plain rows it saw.
    assert classes(fetcher.claim(1, [], [])) == ["P0"]
    assert reads(fetcher) == "plain"
    stage(sql_broker, "B", 1, tenant="b")
    assert classes(fetcher.claim(1, [], [])) == ["B0"]
