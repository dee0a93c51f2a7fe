"""``asynctask periodic list|pause|resume``: the broker's schedules from a shell (SQLite broker)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from asynctask import Registry, Settings
from asynctask.brokers import open_broker
from asynctask.db.migrate import upgrade
from asynctask.middleware import Chain
from asynctask.periodic import Schedule, Schedules
from asynctask.worker.periodic import Scheduler
from tests.cli_support import run_cli, without_asynctask_environment

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def broker_url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    upgrade(url)
    broker = open_broker(Settings(broker_url=url))
    schedules = Schedules()
    schedules.add(Schedule("nightly", "report", "0 3 * * *", tz="Asia/Tokyo", queue="low"))
    schedules.add(Schedule("often", "beat", "*/5 * * * * *"))
    Scheduler(broker.periodic, schedules, Registry(), Chain(), "cli-test").declare(time.time())
    broker.close()
    yield url


@pytest.fixture
def run(broker_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    without_asynctask_environment(monkeypatch)

    def run_main(*argv: str) -> tuple[int, str, str]:
        return run_cli([*argv, "--broker", broker_url], capsys)

    return run_main


def test_list_shows_each_schedule_with_its_next_run(run: Run) -> None:
    status, out, _ = run("periodic", "list")
    assert status == 0
    nightly, often = out.splitlines()
    assert nightly.startswith("nightly: active, '0 3 * * *' Asia/Tokyo, job report on low; next ")
    assert " 18:00:00 UTC, last " in nightly  # 03:00 in Tokyo
    assert often.startswith("often: active, '*/5 * * * * *' UTC, job beat on default; next ")


def test_pause_and_resume_by_name(run: Run) -> None:
    status, out, _ = run("periodic", "pause", "often")
    assert status == 0 and out.startswith("often: paused,")
    assert "often: paused," in run("periodic", "list")[1]
    status, out, _ = run("periodic", "resume", "often")
    assert status == 0 and out.startswith("often: active,")


def test_an_unknown_name_is_one_line_and_status_1(run: Run) -> None:
    status, out, err = run("periodic", "pause", "missing")
    assert (status, out) == (1, "")
    assert err.strip().splitlines() == ["asynctask: no periodic schedule 'missing'"]
