"""A queue no live worker listens to, on each broker: the read API knows the queues the live
processes take from, ``create_task`` warns (its view and one log record), and so does
``asynctask enqueue`` (on stderr)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import asynctask
from asynctask import Registry, Settings
from asynctask.api import ProcessSet
from asynctask.cli import main
from asynctask.tasks.service import Tracking
from asynctask.tracking.views import TaskWarning
from tests.api.stores import Store

UNHEARD = TaskWarning("no_worker", "no live worker listens to queue 'imports'; the jobs wait until one does")


def test_the_listened_queues_are_those_of_the_live_processes_that_take_jobs(store: Store) -> None:
    store.process("vm:1:aaaaaaaaaaaa", info={"queues": ["imports", "default"]})
    store.process("vm:2:bbbbbbbbbbbb", info={"queues": ["reports"]}, alive=False)
    store.process("vm:3:cccccccccccc", info={"queues": ["mailers", "default"]}, quiet=True)

    assert ProcessSet(settings=store.settings).listened_queues() == {"imports", "default"}


def test_create_task_warns_once_while_no_worker_listens_to_its_queue(
    store: Store, registry: Registry, tracking: Tracking, caplog: pytest.LogCaptureFixture
) -> None:
    @asynctask.job(queue="imports", registry=registry)
    def load(rows: list[Any]) -> None: ...

    store.process("vm:1:aaaaaaaaaaaa", info={"queues": ["default"]})
    with caplog.at_level(logging.WARNING, logger="asynctask"):
        view = tracking.create_task(load, range(30), chunk_size=10)
    assert view.warnings == (UNHEARD,)
    [record] = [r for r in caplog.records if r.name == "asynctask"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == f"task {view.id}: {UNHEARD.message}"

    caplog.clear()
    store.process("vm:2:bbbbbbbbbbbb", info={"queues": ["imports"]})
    with caplog.at_level(logging.WARNING, logger="asynctask"):
        heard = tracking.create_task(load, range(30), chunk_size=10)
    assert heard.warnings == ()
    assert [r for r in caplog.records if r.name == "asynctask"] == []


def test_enqueue_says_on_stderr_that_no_worker_listens_to_the_queue(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    settings: Settings = store.settings
    argv = ["enqueue", "SleepWorker", "[1]", "--broker", settings.broker, "--namespace", settings.namespace]

    assert main([*argv, "--queue", "imports"]) == 0
    out, err = capsys.readouterr()
    assert len(out.split()) == 1
    assert err == "warning: no live worker listens to queue 'imports'; the job waits until one does\n"

    store.process("vm:1:aaaaaaaaaaaa", info={"queues": ["imports"]})
    assert main([*argv, "--queue", "imports"]) == 0
    assert capsys.readouterr().err == ""
