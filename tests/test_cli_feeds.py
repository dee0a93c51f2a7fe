"""``asynctask tasks show|update|pause|resume``: a task shown, and a fed task tuned, from a shell
(real Redis broker, SQLite tracking), and how each refusal reads (one line; status 2 for input
to fix, 1 for a task that cannot change)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asynctask import Client, Registry, Settings, Tracking, job
from asynctask.cli import main
from asynctask.db.migrate import upgrade
from asynctask.feeds import Feed, FeedState
from asynctask.middleware import Chain, TrackingClientMiddleware
from asynctask.tasks.creation import new_task_id
from asynctask.tracking.views import FeedView
from tests.cli_support import run_cli, without_asynctask_environment
from tests.conftest import REDIS_URL

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def tracking(redis_settings: Settings, registry: Registry, tmp_path: Path) -> Tracking:
    url = f"sqlite:///{tmp_path / 'tracking.db'}"
    upgrade(url)

    @job(registry=registry)
    def step(chunk: list[Any]) -> None:
        pass

    own = Settings(**{**redis_settings.__dict__, "database_url": url})
    return Tracking(Client(own, registry=registry, middleware=Chain([TrackingClientMiddleware()])))


@pytest.fixture
def run(tracking: Tracking, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """``asynctask ARGV... --redis --namespace --database-url`` of ``tracking``'s broker."""
    without_asynctask_environment(monkeypatch)
    settings = tracking.client.settings
    where = ["--redis", REDIS_URL, "--namespace", settings.namespace, "--database-url", settings.database_url]

    def run_main(*argv: str) -> tuple[int, str, str]:
        return run_cli([*argv, *where], capsys)

    return run_main


def state(tracking: Tracking, task_id: str) -> FeedState | None:
    return tracking.client.broker.feeds.state(task_id)


def test_show_a_task_with_its_callbacks(tracking: Tracking, run: Run) -> None:
    task = tracking.create_task("step", range(3), on_complete="step", on_failure="step")
    tracking.cancel_task(task.id)
    code, out, err = run("tasks", "show", task.id)
    assert (code, err) == (0, "")
    first, second, complete, failure = out.splitlines()
    assert first == f"task {task.id} cancelled: 3/3 done (cancelled 3)"
    assert second.startswith("job step on queue default, created ") and ", ended " in second
    assert re.fullmatch(r"on complete: step \(job \w+\) pushed since \S+ \S+", complete), complete
    assert re.fullmatch(r"on failure: step \(job \w+\) pushed since \S+ \S+", failure), failure
    assert run("tasks", "show", "f" * 32)[0] == 1


def test_show_a_task_with_its_parents_and_children(tracking: Tracking, run: Run) -> None:
    parent = tracking.create_task("step", range(2))
    child = tracking.create_task("step", range(2), after=[parent.id], run_if="complete")
    grandchild = tracking.create_task("step", range(2), after=[child.id])
    code, out, err = run("tasks", "show", child.id)
    assert (code, err) == (0, "")
    assert out.splitlines()[2:] == [
        "runs if its parents ended: waiting",
        f"after task {parent.id} (step): not ended",
        f"before task {grandchild.id} (step): waiting",
    ]
    tracking.cancel_task(parent.id)
    tracking.cancel_task(child.id)
    code, out, _ = run("tasks", "show", grandchild.id)
    assert out.splitlines()[2:] == [
        "runs if its parents succeeded: dropped",
        f"cancelled: task {child.id} ended cancelled",
        f"after task {child.id} (step): did not succeed",
    ]


def test_update_pause_and_resume_a_fed_task(tracking: Tracking, run: Run) -> None:
    task = tracking.create_task("step", range(10), parallel=2)
    code, out, err = run("tasks", "update", task.id, "--parallel", "4", "--priority", "-3", "--interval", "0")
    assert (code, err) == (0, "")
    assert out == f"task {task.id} pending: parallel 4, interval 0 s, priority -3; 6 held, 0/10 done\n"
    assert state(tracking, task.id) == FeedState(Feed(4, 0.0, -3, False), held=6, out=4)
    code, out, _ = run("tasks", "pause", task.id)
    assert code == 0 and out.startswith(f"task {task.id} paused: parallel 4,")
    assert state(tracking, task.id) == FeedState(Feed(4, 0.0, -3, True), held=6, out=4)
    run("tasks", "update", task.id, "--interval", "1.5")
    code, out, _ = run("tasks", "resume", task.id)
    assert code == 0 and out.startswith(f"task {task.id} pending: parallel 4, interval 1.5 s,")
    assert tracking.get_task(task.id).feed == FeedView(4, 1.5, -3, False, held=6)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--parallel", "0"], "argument --parallel: parallel must be an integer from 1 to 1000000"),
        (["--parallel", "x"], "argument --parallel: 'x' is not an integer"),
        (["--parallel", "1.5"], "argument --parallel: '1.5' is not an integer"),
        (["--interval", "-1"], "argument --interval: interval must be a number of seconds from 0 to 86400"),
        (["--interval", "nan"], "argument --interval: interval must be a number of seconds from 0 to 86400"),
        (["--priority", "99999999999"], "argument --priority: priority must be an integer from"),
        ([], "give at least one of --parallel, --interval and --priority"),
    ],
    ids=[
        "parallel-0",
        "parallel-x",
        "parallel-float",
        "interval-negative",
        "interval-nan",
        "priority-huge",
        "none",
    ],
)
def test_a_bad_value_is_one_line_and_changes_nothing(
    tracking: Tracking, run: Run, options: list[str], message: str
) -> None:
    task = tracking.create_task("step", range(10), parallel=2)
    code, out, err = run("tasks", "update", task.id, *options)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err
    assert state(tracking, task.id) == FeedState(Feed(2), held=8, out=2)


@pytest.mark.parametrize("command", [["update", "--parallel", "3"], ["pause"], ["resume"]])
def test_a_task_that_cannot_change_is_one_line(tracking: Tracking, run: Run, command: list[str]) -> None:
    unfed = tracking.create_task("step", range(3)).id
    ended = tracking.create_task("step", range(3), parallel=1).id
    tracking.cancel_task(ended)
    name, *options = command
    for task_id, message in (
        ("nosuchtask", "asynctask: no task nosuchtask"),
        (unfed, f"asynctask: task {unfed} is not fed: it was created without parallel"),
        (ended, f"asynctask: task {ended} has ended; its feed cannot change"),
    ):
        code, out, err = run("tasks", name, task_id, *options)
        assert (code, out, err) == (1, "", message + "\n")


def test_tasks_alone_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "update" in out and "pause" in out and "resume" in out


def test_a_task_id_is_never_read_as_an_option() -> None:
    # A random id starting with "-" made `tasks update <id>` fail one time in 64.
    ids = [new_task_id() for _ in range(2_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", task_id) for task_id in ids)
