"""The operators' dashboard in a real browser: headless Chromium (Debian's) driven by Playwright
against a real API server and two real workers (subprocesses), on Redis and on the SQL broker.

One operator's session goes through it all: the login (a tenant's token refused), the overview
after real jobs ran, busy threads, a queue paused and resumed, the retry and dead sets acted
on, a task cancelled, then one worker quieted and the other stopped. Every action is checked
in the broker (read API, HTTP API or ``asynctask status --json``), not only on the page. Jobs
carry an ``<img onerror>`` in their arguments and error messages: no page may run it, every
page must show it as text, and no page may break its Content-Security-Policy.

Screenshots go to the test's tmp_path; the README's (docs/images/dashboard-*.png) are copied
from a Redis run by hand.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import ConsoleMessage, Dialog, Locator, Page, Response, expect, sync_playwright

from asynctask import Client, Settings
from asynctask.api import DeadSet, PeriodicSet, ProcessSet, Queue, RetrySet, ScheduledSet, Stats, WorkSet
from asynctask.api.reader import close_shared
from asynctask.brokers.pacing import CLAIMS_UNDER_WAY, PREFETCH_LIMIT
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.middleware import Chain
from asynctask.tokens import create_token
from tests.conftest import REDIS_URL, wait_for_beats, wait_until
from tests.jobs import dashboard_jobs as jobs
from tests.webapi.conftest import CHROMIUM
from tests.webapi.test_browser import (
    CHROMIUM_ARGS,
    RECORD_POLICY_VIOLATIONS,
    call_api,
    cli,
    fail_with_logs,
    serving,
)

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "jobs" / "dashboard_jobs.py"
HOSTILE = "<img src=x onerror=alert(1)>"
#: Threads of each of the two worker processes.
THREADS = 2
#: For what waits on workers, in milliseconds (Playwright) or seconds (``wait_until``).
LIVE_TIMEOUT = 30_000
LIVE_SECONDS = 30.0
#: Variables of the outer environment that would point the processes at another broker.
BROKER_VARIABLES = (
    "ASYNCTASK_REDIS_URL",
    "REDIS_URL",
    "ASYNCTASK_BROKER_URL",
    "ASYNCTASK_DATABASE_URL",
    "ASYNCTASK_NAMESPACE",
)


@dataclass
class Board:
    """The running processes, and what the test reads the broker with."""

    base_url: str
    env: dict[str, str]
    settings: Settings
    client: Client
    #: The operator's and a tenant's bearer tokens.
    operator: str
    tenant: str
    workers: list[subprocess.Popen[bytes]]
    logs: list[Path]
    #: Where the jobs' gate and marker files go.
    files: Path

    def api(self, path: str, body: Any = None) -> Any:
        return call_api(self.base_url, self.operator, path, body)

    def status(self) -> Any:
        return json.loads(cli(self.env, "status", "--json"))

    def wait(self, what: str, predicate: Callable[[], Any], timeout: float = LIVE_SECONDS) -> Any:
        try:
            return wait_until(predicate, timeout, interval=0.1)
        except AssertionError:
            fail_with_logs(f"{what}: not within {timeout} s", self.logs)

    def identity(self, worker: subprocess.Popen[bytes]) -> str:
        # The process record names the pid of the ``asynctask worker`` process.
        return next(p.identity for p in ProcessSet(settings=self.settings) if p.pid == worker.pid)

    def busy(self) -> int:
        return sum(p.busy for p in ProcessSet(settings=self.settings))

    def gate(self, name: str) -> str:
        return str(self.files / name)


@contextmanager
def running_board(broker: str, namespace: str, tmp_path: Path) -> Iterator[Board]:
    """Two workers and an API server (subprocesses) over a fresh Redis namespace and SQLite
    tracking database, or over a fresh SQLite database as the broker."""
    env = {k: v for k, v in os.environ.items() if k not in BROKER_VARIABLES}
    if broker == "redis":
        env |= {
            "ASYNCTASK_REDIS_URL": REDIS_URL,
            "ASYNCTASK_NAMESPACE": namespace,
            "ASYNCTASK_DATABASE_URL": f"sqlite:///{tmp_path / 'tracking.db'}",
        }
    else:
        # The SQL broker keeps the tracking tables in its own database.
        env["ASYNCTASK_BROKER_URL"] = f"sqlite:///{tmp_path / 'broker.db'}"
    env |= {
        "ASYNCTASK_HEARTBEAT_INTERVAL": "0.5",
        # Longer than test_browser's: a worker starved for a few seconds on a loaded machine
        # must not look dead, its record gone from the processes page.
        "ASYNCTASK_PROCESS_TTL": "10",
        "ASYNCTASK_SCHEDULED_POLL_INTERVAL": "0.2",
        "ASYNCTASK_API_AUTH": "on",
        "ASYNCTASK_API_SECRET_KEY": secrets.token_urlsafe(32),
        "ASYNCTASK_API_TOKEN_CACHE_SECONDS": "0",
    }
    settings = Settings.from_env(env)
    # What ``asynctask db upgrade`` and ``asynctask tokens create`` do, without their start-up
    # time (seconds each on a loaded machine).
    upgrade(settings.database_url)
    engine = create_database_engine(settings.database_url)
    try:
        operator = create_token(engine, "ops", operator=True).token
        tenant = create_token(engine, "t1").token
    finally:
        engine.dispose()
    client = Client(settings, middleware=Chain())
    files = tmp_path / "files"
    files.mkdir()
    worker = ["worker", "-r", str(JOBS), "-q", "default", "-q", "reports", "-c", str(THREADS), "-t", "2"]
    try:
        with serving({"worker-a": worker, "worker-b": worker}, env, tmp_path, JOBS) as served:
            url, workers, logs = served.base_url, served.procs[:2], served.logs
            board = Board(url, env, settings, client, operator, tenant, workers, logs, files)
            pids = {proc.pid for proc in board.workers}
            board.wait(
                "both workers' heartbeats",
                lambda: {p.pid for p in ProcessSet(settings=settings)} == pids,
                timeout=60.0,
            )
            yield board
    finally:
        client.close()
        if broker == "sql":
            # The readers' shared engine holds the database file of this test.
            close_shared()


@dataclass
class Watch:
    """What the browser saw that it must not: alert dialogs (a script of a job's text ran),
    policy violations, script errors and server errors. Confirm dialogs are accepted."""

    alerts: list[str] = field(default_factory=list)
    confirms: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        page.add_init_script(RECORD_POLICY_VIOLATIONS)
        page.on("dialog", self.on_dialog)
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        page.on("response", self.on_response)
        # The init script's list dies with its page; Chromium also logs each violation.
        page.on("console", self.on_console)

    def on_dialog(self, dialog: Dialog) -> None:
        if dialog.type == "confirm":
            self.confirms.append(dialog.message)
            dialog.accept()
        else:
            self.alerts.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

    def on_console(self, message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            self.violations.append(message.text)

    def on_response(self, response: Response) -> None:
        if response.status >= 500:
            self.errors.append(f"{response.status} {response.request.method} {response.url}")

    def collect(self, page: Page) -> None:
        """The violations the page recorded, read before it is left."""
        self.violations += page.evaluate("window.policyViolations ? [...window.policyViolations] : []")

    def visit(self, page: Page, url: str) -> None:
        self.collect(page)
        response = page.goto(url)
        assert response is not None and response.status == 200, (url, response and response.status)

    def submit(self, page: Page, button: Locator) -> None:
        """Click a form's button and wait for the page it leads to."""
        self.collect(page)
        with page.expect_navigation():
            button.click()


@pytest.fixture(params=["redis", "sql"])
def board(request: pytest.FixtureRequest, namespace: str, tmp_path: Path) -> Iterator[Board]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (Debian package chromium)")
    with running_board(request.param, namespace, tmp_path) as running:
        yield running


def test_an_operator_runs_the_dashboard_against_real_workers(board: Board, tmp_path: Path) -> None:
    watch = Watch()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1200, "height": 800})
            page = context.new_page()
            page.set_default_timeout(LIVE_TIMEOUT)
            watch.attach(page)

            log_in(page, watch, board)
            cookie = next(
                c
                for c in context.cookies(f"{board.base_url}/dashboard/")
                if c["name"] == "asynctask_dashboard"
            )
            assert cookie.get("httpOnly") is True and cookie.get("sameSite") == "Strict", cookie
            assert "asynctask_dashboard" not in page.evaluate("document.cookie")

            task_id = real_run(page, watch, board, tmp_path)
            busy_threads_and_a_paused_queue(page, watch, board, tmp_path)
            retry_and_dead_sets(page, watch, board, tmp_path)
            scheduled_and_periodic(page, watch, board)
            hostile_pages(page, watch, board, task_id, tmp_path)
            cancel_a_task(page, watch, board)
            quiet_and_stop(page, watch, board)
            watch.collect(page)
        finally:
            browser.close()

    assert watch.alerts == []
    assert watch.violations == []
    assert watch.errors == []
    # The confirmations were asked for, and accepted: the actions above went through them.
    assert any(message.startswith("Stop ") for message in watch.confirms), watch.confirms
    assert any("every entry" in message for message in watch.confirms), watch.confirms
    assert any(message.startswith("Cancel this task") for message in watch.confirms), watch.confirms


def log_in(page: Page, watch: Watch, board: Board) -> None:
    watch.visit(page, f"{board.base_url}/dashboard/")
    expect(page).to_have_url(re.compile(r"/dashboard/login\?next=/dashboard/$"))
    token = page.locator('input[name="token"]')
    expect(token).to_have_attribute("type", "password")
    expect(page.locator('input[name="csrf_token"]')).to_have_count(1)

    token.fill(board.tenant)
    with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith("/login")) as refused:
        watch.submit(page, page.get_by_role("button", name="Log in"))
    assert refused.value.status == 403
    expect(page.locator(".error")).to_contain_text("a tenant's, not an operator's")
    expect(page.locator("nav")).to_have_count(0)

    page.locator('input[name="token"]').fill(board.operator)
    watch.submit(page, page.get_by_role("button", name="Log in"))
    expect(page).to_have_url(f"{board.base_url}/dashboard/")
    expect(page.locator("h1")).to_have_text("Overview")


def real_run(page: Page, watch: Watch, board: Board, tmp_path: Path) -> str:
    """Jobs that succeed, fail into the retry and the dead set, wait in a queue no worker
    serves, and a task with a failed job: then the overview against the broker's numbers."""
    client = board.client
    touch = jobs.dashboard_touch.set(client=client)
    for i in range(4):
        touch.perform_async(board.gate(f"ok-{i}"))
    fragile = jobs.dashboard_fragile.set(client=client)
    for i in range(3):
        fragile.perform_async(HOSTILE, board.gate(f"retry-{i}"))
    doomed = jobs.dashboard_fragile.set(client=client, retry=0)
    for i in range(2):
        doomed.perform_async(HOSTILE, board.gate(f"dead-{i}"))
    backlog = jobs.dashboard_hold.set(client=client, queue="backlog")
    for i in range(2):
        backlog.perform_async(HOSTILE, board.gate(f"backlog-{i}"))
    items = [{"name": HOSTILE, "bad": True}, {"name": "plain"}]
    task_id: str = board.api("/api/tasks", {"job": "dashboard_import", "items": items, "chunk_size": 1})[
        "task_id"
    ]

    retries, dead = RetrySet(settings=board.settings), DeadSet(settings=board.settings)
    board.wait("the jobs' effects", lambda: all((board.files / f"ok-{i}").exists() for i in range(4)))
    board.wait("the retry and dead sets", lambda: retries.size == 3 and dead.size == 2)
    board.wait(
        "the task's end", lambda: board.api(f"/api/tasks/{task_id}")["status"] == "finished_with_errors"
    )
    # 4 + 5 + 2 jobs ran; 5 raised. The counters reach the broker with the workers' heartbeats.
    stats = Stats(settings=board.settings)
    board.wait("the counters", lambda: stats.refresh().processed >= 11 and stats.failed >= 5)
    for worker in board.workers:
        identity = board.identity(worker)
        wait_for_beats(lambda i=identity: getattr(ProcessSet(settings=board.settings).get(i), "beat", None))

    status = board.status()
    watch.visit(page, f"{board.base_url}/dashboard/")
    stats.refresh()
    assert (status["processed"], status["failed"]) == (stats.processed, stats.failed)
    expect(page.locator("#processed")).to_have_text(str(stats.processed))
    expect(page.locator("#failed")).to_have_text(str(stats.failed))
    # The task's JobFailed job is no raised job: it is counted with the tasks' failed jobs.
    expect(page.locator("#failed-in-tasks")).to_have_text("1")
    expect(page.locator("#retries")).to_have_text("3")
    expect(page.locator("#dead")).to_have_text("2")
    expect(page.locator("#processes")).to_have_text("2")
    expect(page.locator("#busy")).to_have_text(str(board.busy()))
    today = datetime.now(UTC).date()
    history = stats.history(1, start=today)
    bar = page.locator("figure.chart g", has=page.locator("title", has_text=today.isoformat()))
    expect(bar.locator("title")).to_have_text(
        f"{today.isoformat()}: {history.processed[today]} run, {history.failed[today]} raised"
    )
    assert float(bar.locator("rect.processed").get_attribute("height") or 0) > 0
    row = page.locator('table.queues tr[data-queue="backlog"]')
    expect(row.locator(".size")).to_have_text(str(Queue("backlog", settings=board.settings).size))
    # Running, but no worker listens to it: its jobs wait.
    expect(row.locator(".state")).to_have_text("running no worker listens to this queue")
    page.screenshot(path=str(tmp_path / "dashboard-overview.png"), full_page=True)
    return task_id


def busy_threads_and_a_paused_queue(page: Page, watch: Watch, board: Board, tmp_path: Path) -> None:
    """All four threads held by jobs: the overview and the processes page show them busy, and
    jobs wait in ``reports`` long enough to pause it from its row. Paused, it keeps its jobs,
    new ones too, while the workers take from ``default``; resumed, they run."""
    hold = board.gate("hold")
    held = jobs.dashboard_hold.set(client=board.client)
    # More than the four threads: a process whose threads ran instant jobs a moment ago may
    # claim a batch of them into its buffer (asynctask.brokers.pacing), at most PREFETCH_LIMIT
    # per thread in each of its claims under way; past what one process can take, the other
    # one's threads still find two.
    for _ in range(CLAIMS_UNDER_WAY * PREFETCH_LIMIT * THREADS + THREADS):
        held.perform_async(HOSTILE, hold)
    works = WorkSet(settings=board.settings)
    board.wait("four busy threads", lambda: len(works.works()) == 4 and board.busy() == 4)
    report = jobs.dashboard_touch.set(client=board.client, queue="reports")
    for i in range(2):
        report.perform_async(board.gate(f"report-{i}"))

    watch.visit(page, f"{board.base_url}/dashboard/")
    expect(page.locator("#busy")).to_have_text("4")

    watch.visit(page, f"{board.base_url}/dashboard/processes")
    for worker in board.workers:
        expect(page.locator(f'tr[data-identity="{board.identity(worker)}"] .busy')).to_have_text("2 / 2")
    busy = page.locator("table.works tbody tr[data-jid]")
    expect(busy).to_have_count(4)
    for i in range(4):
        expect(busy.nth(i).locator(".args")).to_contain_text(HOSTILE)
    expect(page.locator("main img")).to_have_count(0)
    page.screenshot(path=str(tmp_path / "dashboard-processes.png"), full_page=True)

    watch.visit(page, f"{board.base_url}/dashboard/queues")
    row = page.locator('tr[data-queue="reports"]')
    expect(row.locator(".size")).to_have_text("2")
    watch.submit(page, row.get_by_role("button", name="Pause"))
    expect(page.locator(".flash")).to_contain_text("queue reports paused")
    reports = Queue("reports", settings=board.settings)
    assert reports.paused
    expect(row.locator(".state")).to_have_text("paused")
    for i in range(2, 4):
        report.perform_async(board.gate(f"report-{i}"))
    watch.visit(page, f"{board.base_url}/dashboard/queues")
    expect(row.locator(".size")).to_have_text("4")
    expect(row.get_by_role("button", name="Resume")).to_be_visible()
    page.screenshot(path=str(tmp_path / "dashboard-queues.png"), full_page=True)

    Path(hold).touch()
    board.wait("the held jobs' end", lambda: not works.works())
    # A live worker still takes from ``default``, and beats twice more: had it been going to
    # take from ``reports``, it would have.
    jobs.dashboard_touch.set(client=board.client).perform_async(board.gate("alive"))
    board.wait("a job of default", lambda: (board.files / "alive").exists())
    for worker in board.workers:
        identity = board.identity(worker)
        wait_for_beats(lambda i=identity: getattr(ProcessSet(settings=board.settings).get(i), "beat", None))
    assert reports.size == 4
    assert not any((board.files / f"report-{i}").exists() for i in range(4))

    watch.visit(page, f"{board.base_url}/dashboard/queues")
    watch.submit(page, page.locator('tr[data-queue="reports"]').get_by_role("button", name="Resume"))
    expect(page.locator(".flash")).to_contain_text("queue reports resumed")
    assert not reports.paused
    board.wait(
        "the resumed queue's jobs", lambda: all((board.files / f"report-{i}").exists() for i in range(4))
    )
    assert reports.size == 0


def retry_and_dead_sets(page: Page, watch: Watch, board: Board, tmp_path: Path) -> None:
    retries, dead = RetrySet(settings=board.settings), DeadSet(settings=board.settings)
    watch.visit(page, f"{board.base_url}/dashboard/sets/retry")
    rows = page.locator("table.entries tbody tr[data-jid]")
    expect(rows).to_have_count(3)
    for i in range(3):
        expect(rows.nth(i).locator(".args")).to_contain_text(HOSTILE)
        expect(rows.nth(i).locator(".error")).to_contain_text(f"RuntimeError: refused {HOSTILE}")
    expect(page.locator("main img")).to_have_count(0)
    page.screenshot(path=str(tmp_path / "dashboard-retries.png"), full_page=True)
    # Which entry is which: the gate each one waits for is its second argument.
    jids = {entry.args[1]: entry.jid for entry in retries}
    first, second, third = (jids[board.gate(f"retry-{i}")] for i in range(3))
    toolbar = page.locator("form.bulk .toolbar")

    # "Retry now": the job is enqueued, runs (its gate is open now) and is gone for good.
    Path(board.gate("retry-0")).touch()
    page.locator(f'tr[data-jid="{first}"] input[name="entry"]').check()
    watch.submit(page, toolbar.get_by_role("button", name="Retry now"))
    expect(page.locator(".flash")).to_contain_text("retry: 1 of 1 entries")
    board.wait("the retried job's run", lambda: (board.files / "retry-0.ran").exists())
    assert retries.find_job(first) is None
    expect(page.locator(f'tr[data-jid="{first}"]')).to_have_count(0)

    page.locator(f'tr[data-jid="{second}"] input[name="entry"]').check()
    watch.submit(page, toolbar.get_by_role("button", name="Kill"))
    expect(page.locator(".flash")).to_contain_text("kill: 1 of 1 entries")
    assert retries.find_job(second) is None and dead.find_job(second) is not None

    page.locator(f'tr[data-jid="{third}"] input[name="entry"]').check()
    watch.submit(page, toolbar.get_by_role("button", name="Delete"))
    expect(page.locator(".flash")).to_contain_text("delete: 1 of 1 entries")
    assert retries.size == 0 and dead.find_job(third) is None
    expect(page.locator("table.entries")).to_contain_text("The set is empty.")

    watch.visit(page, f"{board.base_url}/dashboard/sets/dead")
    rows = page.locator("table.entries tbody tr[data-jid]")
    expect(rows).to_have_count(3)
    for i in range(3):
        expect(rows.nth(i).locator(".args")).to_contain_text(HOSTILE)
        expect(rows.nth(i).locator(".error")).to_contain_text(HOSTILE)
    expect(page.locator("main img")).to_have_count(0)
    # Every dead job succeeds when run again, so that an emptied set stays empty.
    gates = ["dead-0", "dead-1", "retry-1"]
    for name in gates:
        Path(board.gate(name)).touch()
    watch.submit(page, page.locator('form.all button[value="retry"]'))
    expect(page.locator(".flash")).to_contain_text("retry: 3 entries")
    assert dead.size == 0
    board.wait("the dead jobs' runs", lambda: all((board.files / f"{name}.ran").exists() for name in gates))
    assert dead.size == 0 and retries.size == 0


def scheduled_and_periodic(page: Page, watch: Watch, board: Board) -> None:
    """A job due in an hour is enqueued now from the scheduled set; a schedule the workers
    declared is listed with its next run, and paused."""
    marker = board.gate("scheduled")
    jid = jobs.dashboard_touch.set(client=board.client).perform_in(3600, marker)
    watch.visit(page, f"{board.base_url}/dashboard/sets/scheduled")
    page.locator(f'tr[data-jid="{jid}"] input[name="entry"]').check()
    watch.submit(page, page.get_by_role("button", name="Enqueue now"))
    expect(page.locator(".flash")).to_contain_text("enqueue: 1 of 1 entries")
    board.wait("the scheduled job's run", lambda: Path(marker).exists())
    assert ScheduledSet(settings=board.settings).size == 0

    schedules = PeriodicSet(settings=board.settings)
    board.wait("the schedule's declaration", lambda: schedules.get("dashboard_yearly") is not None)
    watch.visit(page, f"{board.base_url}/dashboard/periodic")
    row = page.locator('tr[data-schedule="dashboard_yearly"]')
    expect(row.locator(".state")).to_have_text("active")
    expect(row).to_contain_text("0 3 1 1 *")
    watch.submit(page, row.get_by_role("button", name="Pause"))
    entry = schedules.get("dashboard_yearly")
    assert entry is not None and entry.paused
    expect(page.locator('tr[data-schedule="dashboard_yearly"] .state')).to_have_text("paused")


def hostile_pages(page: Page, watch: Watch, board: Board, task_id: str, tmp_path: Path) -> None:
    """The waiting jobs' queue and the task's page show the hostile text as text."""
    watch.visit(page, f"{board.base_url}/dashboard/queues/backlog")
    rows = page.locator("table.jobs tbody tr[data-jid]")
    expect(rows).to_have_count(2)
    for i in range(2):
        expect(rows.nth(i).locator(".args")).to_contain_text(HOSTILE)
    expect(page.locator("main img")).to_have_count(0)

    watch.visit(page, f"{board.base_url}/dashboard/tasks")
    expect(page.locator(f'tr[data-task="{task_id}"] .status')).to_have_text("finished_with_errors")
    watch.visit(page, f"{board.base_url}/dashboard/tasks/{task_id}")
    expect(page.locator("td.status").first).to_have_text("finished_with_errors")
    expect(page.locator("ul.errors")).to_contain_text(f"cannot import {HOSTILE}")
    failed = page.locator("table.events tr", has=page.locator("td.status", has_text="failed"))
    expect(failed).to_have_count(1)
    expect(failed.locator(".args")).to_contain_text(HOSTILE)
    expect(failed.locator(".error")).to_contain_text(f"cannot import {HOSTILE}")
    expect(page.locator("main img")).to_have_count(0)
    page.screenshot(path=str(tmp_path / "dashboard-task.png"), full_page=True)


def cancel_a_task(page: Page, watch: Watch, board: Board) -> None:
    gate = board.gate("slow-task")
    items = [{"name": f"slow {i}", "gate": gate} for i in range(3)]
    task_id = board.api("/api/tasks", {"job": "dashboard_import", "items": items, "chunk_size": 1})["task_id"]
    board.wait("the slow task's start", lambda: board.api(f"/api/tasks/{task_id}")["status"] == "running")
    watch.visit(page, f"{board.base_url}/dashboard/tasks/{task_id}")
    watch.submit(page, page.get_by_role("button", name="Cancel task"))
    expect(page.locator(".flash")).to_contain_text("task cancelled")
    assert board.api(f"/api/tasks/{task_id}")["status"] == "cancelled"
    expect(page.locator("td.status").first).to_have_text("cancelled")
    Path(gate).touch()


def quiet_and_stop(page: Page, watch: Watch, board: Board) -> None:
    quieted, stopped = board.workers
    quiet_id, stop_id = board.identity(quieted), board.identity(stopped)
    processes = ProcessSet(settings=board.settings)
    watch.visit(page, f"{board.base_url}/dashboard/processes")
    expect(page.locator("table.processes tbody tr[data-identity]")).to_have_count(2)

    watch.submit(page, page.locator(f'tr[data-identity="{quiet_id}"]').get_by_role("button", name="Quiet"))
    expect(page.locator(".flash")).to_contain_text(f"{quiet_id}: told to finish its jobs")
    # The process reads its signals at its next heartbeat.
    board.wait("the quiet process", lambda: (found := processes.get(quiet_id)) is not None and found.is_quiet)
    watch.visit(page, f"{board.base_url}/dashboard/processes")
    expect(page.locator(f'tr[data-identity="{quiet_id}"] .state')).to_have_text("quiet")
    expect(page.locator(f'tr[data-identity="{quiet_id}"]').get_by_role("button", name="Quiet")).to_have_count(
        0
    )
    assert stopped.poll() is None

    watch.submit(page, page.locator(f'tr[data-identity="{stop_id}"]').get_by_role("button", name="Stop"))
    expect(page.locator(".flash")).to_contain_text(f"{stop_id}: told to stop")
    try:
        stopped.wait(LIVE_SECONDS)
    except subprocess.TimeoutExpired:
        fail_with_logs("the stopped worker did not exit", board.logs)
    assert stopped.returncode == 0, stopped.returncode
    assert quieted.poll() is None
    # A process that stopped leaves the process set at once (its record expires later).
    assert [p.identity for p in processes] == [quiet_id]
    watch.visit(page, f"{board.base_url}/dashboard/processes")
    expect(page.locator("table.processes tbody tr[data-identity]")).to_have_count(1)
    expect(page.locator(f'tr[data-identity="{quiet_id}"] .state')).to_have_text("quiet")
