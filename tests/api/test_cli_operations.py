"""``asynctask status``, ``asynctask retry|dead list|retry|delete`` and ``asynctask queue
clear|pause|resume`` on every broker: what an operator sees and does from a shell."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from asynctask import payload
from asynctask.api import DeadSet, Queue, RetrySet
from asynctask.cli import status as status_cli
from tests.api.conftest import sidekiq_job
from tests.api.stores import Store
from tests.cli_support import run_cli, without_asynctask_environment


class Shell:
    def __init__(self, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
        settings = store.settings
        self.connection = ["--broker", settings.broker]
        if settings.uses_redis:
            self.connection += ["--namespace", settings.namespace]
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        return run_cli([*argv, *self.connection], self.capsys)


@pytest.fixture
def shell(store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Shell:
    without_asynctask_environment(monkeypatch)
    return Shell(store, capsys)


def failed(message: str = "boom", **fields: object) -> payload.JobDict:
    return sidekiq_job(
        error_message=message, error_class="RuntimeError", failed_at=payload.now(), retry_count=2, **fields
    )


def test_status_shows_counts_queues_sets_and_processes(store: Store, shell: Shell) -> None:
    today = datetime.now(UTC).date().isoformat()
    for name, value in (
        ("processed", 1234),
        ("failed", 5),
        (f"processed:{today}", 100),
        (f"failed:{today}", 1),
    ):
        store.set_stat(name, value)
    for _ in range(3):
        store.push(sidekiq_job(enqueued_at=payload.now() - 30), "mail")
    store.push(sidekiq_job(), "default")
    store.add("retry", failed(), payload.now() + 60)
    store.add("dead", failed(), payload.now())
    store.add("dead", failed(), payload.now())
    store.add("stopped", sidekiq_job(cursor=41), payload.now())
    info = {"hostname": "web-1", "pid": 4321, "tag": "api", "concurrency": 10, "queues": ["mail", "default"]}
    store.process("web-1:4321:abc", busy=2, info={**info, "started_at": payload.now() - 3700})

    status, out, _ = shell("status")

    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "processed 1,234, failed 5 (today 100 and 1)"
    assert lines[1] == "sets: scheduled 0, retry 1, dead 2, stopped 1"
    assert lines[2] == "queues: 2, 4 jobs waiting"
    queues = {line.split()[0]: line for line in lines[3:5]}
    assert queues["mail"].split()[1] == "3" and 29 <= float(queues["mail"].split()[3]) <= 60
    assert queues["default"].split()[1] == "1"
    assert lines[5] == "processes: 1, 2 of 10 threads busy"
    assert lines[6] == "  web-1:4321 [api]  busy 2/10  queues mail,default  up 1h01m"

    status, out, _ = shell("status", "--json")
    report = json.loads(out)
    assert status == 0
    assert (report["processed"], report["failed"], report["today"]) == (
        1234,
        5,
        {"processed": 100, "failed": 1},
    )
    assert (report["scheduled"], report["retry"], report["dead"], report["stopped"]) == (0, 1, 2, 1)
    assert sorted((q["name"], q["size"]) for q in report["queues"]) == [("default", 1), ("mail", 3)]
    [process] = report["processes"]
    assert (process["hostname"], process["busy"], process["concurrency"], process["quiet"]) == (
        "web-1",
        2,
        10,
        False,
    )


def test_list_shows_each_entry_latest_first_and_never_a_control_character(store: Store, shell: Shell) -> None:
    now = payload.now()
    store.add("dead", failed("first"), now - 10)
    store.add("dead", failed("\x1b[2Jwiped <b>", **{"class": "Export\x07Job"}), now)

    status, out, _ = shell("dead", "list")

    assert status == 0
    latest, first = out.splitlines()
    assert "\x1b" not in out and "\x07" not in out
    assert "Export\\x07Job on default  retry_count 2  RuntimeError: \\x1b[2Jwiped <b>" in latest
    assert first.endswith("RuntimeError: first")
    assert shell("retry", "list")[1] == "the retry set is empty\n"
    status, out, _ = shell("dead", "list", "--limit", "1")
    assert out.splitlines()[1] == "... 1 more (--limit)"


def test_retry_enqueues_the_jobs_named_and_says_which_it_did_not_find(store: Store, shell: Shell) -> None:
    jobs = [failed(args=[n]) for n in range(3)]
    for job in jobs:
        store.add("retry", job, payload.now() + 60)
    missing = "f" * 24

    status, out, err = shell("retry", "retry", str(jobs[0]["jid"]), missing, str(jobs[2]["jid"]))

    assert status == 1
    assert out.splitlines() == [f"retried {jobs[0]['jid']}", f"retried {jobs[2]['jid']}"]
    assert err == f"no job {missing} in the retry set\n"
    queued = {job["jid"]: job for job in store.queued()}
    assert set(queued) == {jobs[0]["jid"], jobs[2]["jid"]}
    # "Retry now": the next failure counts as the same attempt.
    assert queued[jobs[0]["jid"]]["retry_count"] == 1
    assert [entry.jid for entry in RetrySet(settings=store.settings)] == [jobs[1]["jid"]]


def test_all_retries_or_deletes_the_whole_set(store: Store, shell: Shell) -> None:
    for n in range(3):
        store.add("dead", failed(args=[n]), payload.now() - n)
        store.add("retry", failed(args=[n]), payload.now() + 60)

    assert shell("dead", "retry", "--all")[:2] == (0, "retried 3 job(s) of the dead set\n")
    assert shell("retry", "delete", "--all")[:2] == (0, "deleted 3 job(s) of the retry set\n")

    assert sorted(job["args"][0] for job in store.queued()) == [0, 1, 2]
    assert DeadSet(settings=store.settings).size == 0 and RetrySet(settings=store.settings).size == 0


def test_delete_removes_one_entry_and_nothing_is_done_without_jids_or_all(store: Store, shell: Shell) -> None:
    kept, gone = failed(args=["kept"]), failed(args=["gone"])
    store.add("dead", kept, payload.now() - 1)
    store.add("dead", gone, payload.now())

    assert shell("dead", "delete", str(gone["jid"]))[:2] == (0, f"deleted {gone['jid']}\n")
    status, _, err = shell("dead", "delete")

    assert status == 2 and "give jids, or --all" in err
    assert [entry.jid for entry in DeadSet(settings=store.settings)] == [kept["jid"]]


def test_queue_clear_deletes_the_waiting_jobs_of_that_queue_only(store: Store, shell: Shell) -> None:
    for _ in range(2):
        store.push(sidekiq_job(), "mail")
    store.push(sidekiq_job(), "default")

    assert shell("queue", "clear", "mail")[:2] == (0, "cleared 2 job(s) from the queue 'mail'\n")

    assert Queue("mail", settings=store.settings).size == 0
    assert Queue("default", settings=store.settings).size == 1


def test_queue_pause_and_resume_and_status_shows_the_paused_queues(store: Store, shell: Shell) -> None:
    for _ in range(2):
        store.push(sidekiq_job(), "mail")

    assert shell("queue", "pause", "mail")[:2] == (0, "paused the queue 'mail' (2 job(s) waiting)\n")
    assert shell("queue", "pause", "empty")[:2] == (0, "paused the queue 'empty' (0 job(s) waiting)\n")

    assert Queue("mail", settings=store.settings).paused
    status, out, _ = shell("status")
    assert status == 0
    lines = out.splitlines()
    assert lines[2] == "queues: 2, 2 jobs waiting"
    assert lines[3].split() == ["empty", "0", "latency", "0.0", "s", "paused"]
    assert lines[4].split()[:2] == ["mail", "2"] and lines[4].endswith("  paused")
    report = json.loads(shell("status", "--json")[1])
    assert [(q["name"], q["paused"]) for q in report["queues"]] == [("empty", True), ("mail", True)]

    assert shell("queue", "resume", "mail")[:2] == (0, "resumed the queue 'mail' (2 job(s) waiting)\n")

    assert not Queue("mail", settings=store.settings).paused
    report = json.loads(shell("status", "--json")[1])
    assert [(q["name"], q["paused"]) for q in report["queues"]] == [("empty", True), ("mail", False)]
    assert not shell("status")[1].splitlines()[4].endswith("paused")


def test_a_queue_name_no_job_can_carry_is_a_usage_error(store: Store, shell: Shell) -> None:
    status, out, err = shell("queue", "pause", "q" * 256)
    assert (status, out) == (2, "")
    assert "not a queue name" in err and "printable" in err
    assert Queue.all(settings=store.settings) == []


@pytest.mark.parametrize("argv", [("dead", "list", "--limit", "0"), ("status", "--watch", "0")])
def test_a_bound_below_one_is_a_usage_error(shell: Shell, argv: tuple[str, ...]) -> None:
    status, _, err = shell(*argv)
    assert status == 2 and "(see asynctask" in err


def test_watch_prints_the_report_again_until_interrupted(
    store: Store, shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr("asynctask.cli.status.time.sleep", nap)
    store.push(sidekiq_job(), "mail")

    status, out, _ = shell("status", "--watch", "2.5")

    assert status == 0 and naps == [2.5, 2.5]
    reports = out.split(status_cli.CLEAR)
    assert reports[0] == "" and len(reports) == 3
    assert all("queues: 1, 1 jobs waiting" in report for report in reports[1:])
