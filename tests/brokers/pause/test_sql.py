"""Paused queues in the SQL broker, on SQLite and PostgreSQL: no claim takes their jobs, fair
or in push order, nor a keyed job promoted into one; an idle poll does not see them."""

from __future__ import annotations

from collections.abc import Callable

from asynctask import payload
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.sql import SqlBroker
from asynctask.brokers.sql.reads import SqlReader
from asynctask.settings import QueueSpec
from tests.brokers.test_sql_broker import claim_all, job, rows

QUEUES = (QueueSpec("held"), QueueSpec("ordered", fair=False), QueueSpec("open"))


def paused(broker: SqlBroker, name: str, value: bool = True) -> None:
    SqlReader(broker.engine, broker.settings).queue_pause(name, value)


def queues(units: list[UnitOfWork]) -> list[str]:
    return [u.queue for u in units]


def waiting(broker: SqlBroker, names: tuple[str, ...]) -> bool:
    """What an idle SQLite worker's poll reads (PostgreSQL's runs the same statement)."""
    params = {f"q{i}": name for i, name in enumerate(names)}
    with broker.engine.connect() as connection:
        return connection.execute(broker.store.sql.has_work(len(names)), params).first() is not None


def test_claims_and_idle_polls_leave_paused_queues_alone_fair_or_not(
    make_sql_broker: Callable[..., SqlBroker],
) -> None:
    broker = make_sql_broker(queues=QUEUES)
    broker.push([(job(queue=name), None) for name in ("held", "held", "ordered", "ordered", "open")])
    paused(broker, "held")
    paused(broker, "ordered")
    fetcher = broker.fetcher("me")
    fetcher.register()

    assert queues(claim_all(fetcher)) == ["open"]
    assert claim_all(fetcher) == []
    assert not waiting(broker, ("held", "ordered"))
    assert [r.locked_by for r in rows(broker) if r.queue != "open"] == [None] * 4

    paused(broker, "held", False)
    assert waiting(broker, ("held", "ordered"))
    assert queues(claim_all(fetcher)) == ["held", "held"]
    paused(broker, "ordered", False)
    assert queues(claim_all(fetcher)) == ["ordered", "ordered"]


def test_a_keyed_job_promoted_into_a_paused_queue_waits_for_its_resume(
    make_sql_broker: Callable[..., SqlBroker],
) -> None:
    broker = make_sql_broker(queues=(QueueSpec("open"), QueueSpec("held")))
    first = job(queue="open", concurrency_key="k", concurrency_limit=1)
    second = job(queue="held", concurrency_key="k", concurrency_limit=1)
    broker.push([(first, None), (second, None)])
    paused(broker, "held")
    fetcher = broker.fetcher("me")
    fetcher.register()
    [unit] = claim_all(fetcher)

    # The end of the first frees the key's slot: the second is promoted into its queue,
    # where the claim that acknowledged the first leaves it.
    assert fetcher.claim(1, [unit], []) == []

    [row] = rows(broker)
    assert (row.jid, row.state, row.holds, row.locked_by) == (second["jid"], "queued", True, None)
    paused(broker, "held", False)
    assert [payload.loads(u.payload)["jid"] for u in claim_all(fetcher)] == [second["jid"]]
