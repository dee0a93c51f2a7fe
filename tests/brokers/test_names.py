"""Queue names, jids and job class names that no broker holds are refused by the client with
``InvalidName``, on every broker, before anything is written: nothing reaches a worker or the
database."""

from __future__ import annotations

from typing import Any

import pytest

import asynctask
from asynctask import Client, InvalidName, Registry, Settings, Tracking
from asynctask.api import Queue, ScheduledSet
from tests.brokers.conftest import ROOT, worker_env
from tests.processes import run_module

BAD = {
    "a 100,000-character queue": ("queue", {"queue": "q" * 100_000}),
    "a queue with NUL": ("queue", {"queue": "imports\x00"}),
    "a queue with a control character": ("queue", {"queue": "\x1b[2J"}),
    "a 1 MB jid": ("jid", {"jid": "j" * 1_000_000}),
    "a 65-character jid": ("jid", {"jid": "j" * 65}),
    "a jid with NUL": ("jid", {"jid": "abc\x00"}),
    "a job class with NUL": ("class", {"class": "Import\x00Rows"}),
    "a 256-character job class": ("class", {"class": "C" * 256}),
    "a job class with a lone surrogate": ("class", {"class": "Import\udc00"}),
    "a retry queue with NUL": ("retry_queue", {"retry_queue": "r\x00"}),
}


def nothing_written(settings: Settings) -> None:
    assert Queue("default", settings=settings).size == 0
    assert ScheduledSet(settings=settings).size == 0
    for queue in Queue.all(settings=settings):
        assert queue.size == 0, queue.name


@pytest.mark.parametrize("case", BAD)
def test_the_client_refuses_a_name_no_broker_holds(client: Client, settings: Settings, case: str) -> None:
    field, fields = BAD[case]
    item: dict[str, Any] = {"class": "ImportRows", "args": [1], **fields}
    with pytest.raises(InvalidName) as refused:
        client.push(item)
    assert refused.value.field == field
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 200
    with pytest.raises(InvalidName):
        client.push({**item, "at": 4102444800.0})
    if field != "jid":
        with pytest.raises(InvalidName):
            client.push_bulk({**item, "args": [[1], [2]]})
    nothing_written(settings)


def test_job_definitions_and_their_options_refuse_such_names(
    client: Client, registry: Registry, settings: Settings
) -> None:
    with pytest.raises(InvalidName, match="queue"):

        @asynctask.job(registry=registry, queue="q\x00")
        def bad_queue() -> None: ...

    with pytest.raises(InvalidName, match="job class"):

        @asynctask.job(registry=registry, name="x" * 300)
        def bad_name() -> None: ...

    @asynctask.job(registry=registry)
    def fine(n: int) -> None: ...

    with pytest.raises(InvalidName, match="queue"):
        fine.set(client=client, queue="q" * 100_000).perform_async(1)
    with pytest.raises(InvalidName, match="jid"):
        fine.set(client=client, jid="j" * 1000).perform_async(1)
    nothing_written(settings)


def test_create_task_refuses_a_queue_no_broker_holds(
    tracking: Tracking, registry: Registry, settings: Settings
) -> None:
    @asynctask.job(registry=registry)
    def rows(chunk: list[int]) -> None: ...

    with pytest.raises(InvalidName, match="queue"):
        tracking.create_task(rows, [1, 2], queue="q\x00")
    nothing_written(settings)
    assert tracking.list_tasks(None).items == ()


def test_the_command_line_says_so_in_one_line(settings: Settings) -> None:
    argv = ["enqueue", "ImportRows", "[1]", "--queue", "q" * 1000]
    result = run_module("asynctask", *argv, cwd=ROOT, env=worker_env(settings), timeout=60)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "queue" in line and "is 1000 characters long" in line
    nothing_written(settings)
