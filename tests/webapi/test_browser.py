"""The example page in a real browser: headless Chromium (Debian's) driven by Playwright against a
real API server and a real worker (subprocesses), a real token and a fresh tracking database.

A CSV of 300 product rows, 10 of them with a negative price, goes in as a file upload; the page
must follow the task live to 100% and show exact counts and the business failures. The final
page is saved as api_page.png in the test's temporary directory, never in the repository: the
README's screenshot (bench/results/api_page.png) is refreshed by copying it from there by hand.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
import redis
from playwright.sync_api import Page, expect, sync_playwright

from tests.conftest import REDIS_URL
from tests.processes import free_port, run_module

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "jobs" / "api_jobs.py"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: Records every value the progress bar shows (aria-valuenow), from the page's first render on.
RECORD_PROGRESS = """
window.progressSeen = [];
document.addEventListener("DOMContentLoaded", () => {
  const bar = document.getElementById("progress");
  new MutationObserver(() => window.progressSeen.push(Number(bar.getAttribute("aria-valuenow"))))
    .observe(bar, { attributes: true, attributeFilter: ["aria-valuenow"] });
});
"""
#: Records what the Content-Security-Policy blocks: the page must need nothing it forbids.
RECORD_POLICY_VIOLATIONS = """
window.policyViolations = [];
document.addEventListener("securitypolicyviolation", (event) =>
  window.policyViolations.push(`${event.violatedDirective} ${event.blockedURI}`));
"""

ROWS = 300
CHUNK_SIZE = 3
#: Rows 13, 43, ..., 283 have a negative price: each lands in its own chunk (row // 3 differ).
BAD_ROWS = [i for i in range(ROWS) if i % 30 == 13]
JOBS_TOTAL = ROWS // CHUNK_SIZE
#: For what waits on jobs running (Playwright's ``expect`` waits 5 s by default).
LIVE_TIMEOUT = 30_000


@dataclass
class Stack:
    base_url: str
    token: str
    logs: list[Path]

    def get(self, path: str) -> Any:
        return self.call(path)

    def call(self, path: str, body: Any = None) -> Any:
        return call_api(self.base_url, self.token, path, body)

    def warm_up(self) -> None:
        """One small task through the whole chain, so that the worker and its flusher are up
        before the page is watched (else the first task may reach SQL in one batch)."""
        item = {"sku": "WARM-UP", "name": "warm-up", "price": "1.00"}
        created = self.call("/api/tasks", {"job": "import_products", "items": [item]})
        deadline = time.monotonic() + 30
        while self.get(f"/api/tasks/{created['task_id']}")["status"] != "finished":
            if time.monotonic() > deadline:
                fail_with_logs("the warm-up task did not finish", self.logs)
            time.sleep(0.05)


def call_api(base_url: str, token: str, path: str, body: Any = None) -> Any:
    """The JSON answer of the API at ``path`` for ``token``: a GET, or a POST of ``body``."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base_url + path, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def products_csv() -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["sku", "name", "price"])
    for i in range(ROWS):
        # Names with a comma and quotes: the CSV is parsed, not split on commas.
        price = "-1.00" if i in BAD_ROWS else f"{i % 50 + 1}.99"
        writer.writerow([f"SKU-{i:04d}", f'Widget "{i}", blue', price])
    return out.getvalue().encode()


def cli(env: dict[str, str], *argv: str) -> str:
    done = run_module("asynctask", *argv, cwd=ROOT, env=env, timeout=60)
    assert done.returncode == 0, f"asynctask {' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def fail_with_logs(message: str, logs: list[Path]) -> NoReturn:
    pytest.fail("\n".join([message, *(f"--- {log.name}\n{log.read_text()}" for log in logs)]))


def wait_ready(base_url: str, procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    deadline = time.monotonic() + 30
    while True:
        for proc, log in zip(procs, logs, strict=True):
            if proc.poll() is not None:
                fail_with_logs(f"{log.stem} exited with {proc.returncode}", logs)
        try:
            with urllib.request.urlopen(f"{base_url}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            # Refused, reset, or (a loaded machine, a server still importing) timed out: try again.
            pass
        if time.monotonic() > deadline:
            fail_with_logs("the API server did not become ready", logs)
        time.sleep(0.1)


def spawn(
    commands: dict[str, list[str]],
    env: dict[str, str],
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
    logs: list[Path],
) -> None:
    """Start each ``asynctask`` command in its own process group, its output in ``<name>.log``;
    each is added to ``procs`` as it starts, so that a caller's cleanup stops every one started."""
    for name, argv in commands.items():
        log = tmp_path / f"{name}.log"
        with log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "asynctask", *argv],
                    env=env,
                    cwd=ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        logs.append(log)


@dataclass
class Served:
    base_url: str
    #: The processes and their logs, in the order started: the workers, then the API server.
    procs: list[subprocess.Popen[bytes]]
    logs: list[Path]


@contextmanager
def serving(
    workers: dict[str, list[str]], env: dict[str, str], tmp_path: Path, jobs: Path
) -> Iterator[Served]:
    """The ``workers`` commands and an API server of one process on a free port (``spawn``),
    once the API answers ready; every process started is stopped on exit."""
    port = free_port()
    api = ["api", "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "-r", str(jobs)]
    served = Served(f"http://127.0.0.1:{port}", [], [])
    try:
        spawn({**workers, "api": api}, env, tmp_path, served.procs, served.logs)
        wait_ready(served.base_url, served.procs, served.logs)
        yield served
    finally:
        for proc in served.procs:
            stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.fixture
def stack(chromium: Path, namespace: str, tmp_path: Path) -> Iterator[Stack]:
    """A worker and an API server (subprocesses) over a fresh namespace and SQLite database."""
    with running_stack(namespace, tmp_path) as running:
        yield running


@contextmanager
def running_stack(namespace: str, tmp_path: Path) -> Iterator[Stack]:
    env = {
        **os.environ,
        "ASYNCTASK_REDIS_URL": REDIS_URL,
        "ASYNCTASK_NAMESPACE": namespace,
        "ASYNCTASK_DATABASE_URL": f"sqlite:///{tmp_path / 'tracking.db'}",
        "ASYNCTASK_HEARTBEAT_INTERVAL": "0.5",
        "ASYNCTASK_PROCESS_TTL": "3",
        "ASYNCTASK_SCHEDULED_POLL_INTERVAL": "0.2",
        "ASYNCTASK_API_AUTH": "on",
        "ASYNCTASK_API_STREAM_INTERVAL": "0.2",
    }
    cli(env, "db", "upgrade")
    token = cli(env, "tokens", "create", "--tenant", "t1", "--label", "browser test").splitlines()[0].strip()
    worker = ["worker", "-r", str(JOBS), "-c", "2", "-t", "2"]
    with serving({"worker": worker}, env, tmp_path, JOBS) as served:
        stack = Stack(served.base_url, token, served.logs)
        stack.warm_up()
        yield stack


def test_page_uploads_a_csv_and_follows_the_task_live_to_the_end(
    chromium: Path, stack: Stack, tmp_path: Path
) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.set_default_timeout(30_000)
            urls: list[str] = []
            page.on("request", lambda request: urls.append(request.url.removeprefix(stack.base_url)))
            page.add_init_script(RECORD_PROGRESS)
            page.add_init_script(RECORD_POLICY_VIOLATIONS)
            task_id = drive_page(page, stack)
            assert page.evaluate("[...window.policyViolations]") == []
            page.screenshot(path=str(tmp_path / "api_page.png"), full_page=True)
        finally:
            browser.close()

    # The page followed the stream; it never fell back to polling the task.
    assert f"/api/tasks/{task_id}/stream" in urls
    assert not any(url.startswith(f"/api/tasks/{task_id}?") for url in urls)
    # What the page showed is what the API says.
    task = stack.get(f"/api/tasks/{task_id}")
    assert task["counts"]["finish"] == JOBS_TOTAL - len(BAD_ROWS)
    assert task["counts"]["failed"] == len(BAD_ROWS)


def drive_page(page: Page, stack: Stack) -> str:
    response = page.goto(stack.base_url + "/")
    # The page runs under the API's policy: its own scripts and styles only, no framing.
    assert response is not None
    assert "script-src 'self'" in response.headers["content-security-policy"]
    # Without a token the jobs list cannot load: the page asks for one, without an error.
    expect(page.locator("#connect-note")).to_be_visible()
    expect(page.locator("#api-error")).to_be_hidden()

    page.fill("#token", stack.token)
    page.click("#load-jobs")
    expect(page.locator("#api-error")).to_be_hidden()
    expect(page.locator('#job option[value="import_products"]')).to_have_count(1)
    page.select_option("#job", "import_products")
    expect(page.locator("#job-description")).to_contain_text("Import a chunk of product rows")
    expect(page.locator("#job-schema")).to_contain_text('"price"')

    # Items failing the job's schema are refused before anything runs: the details are shown.
    page.fill("#items-json", '[{"sku": "A1", "name": "ok", "price": "9.90"}, {"sku": "", "name": "x"}]')
    page.fill("#chunk-size", str(CHUNK_SIZE))
    page.click("#submit")
    error = page.locator("#api-error")
    expect(error).to_contain_text("validation_failed")
    expect(error).to_contain_text("item 1")
    expect(page.locator("#task")).to_be_hidden()

    # The CSV file, sent as the raw text/csv body.
    page.fill("#items-json", "")
    page.set_input_files(
        "#file", files=[{"name": "products.csv", "mimeType": "text/csv", "buffer": products_csv()}]
    )
    expect(page.locator("#source-file")).to_be_checked()
    page.click("#submit")
    expect(page.locator("#task-id")).to_have_text(re.compile(r"^\S+$"))
    task_id = page.locator("#task-id").inner_text()

    progress = page.locator("#progress")
    expect(progress).to_have_text("100%", timeout=LIVE_TIMEOUT)
    expect(progress).to_have_attribute("aria-valuenow", "100")
    # The bar moved forward only, live: at least one value between 0% and 100% was shown.
    seen: list[int] = page.evaluate("[...window.progressSeen]")
    assert seen == sorted(seen) and seen[-1] == 100, seen
    assert any(0 < value < 100 for value in seen), seen
    expect(page.locator("#status")).to_have_text("finished_with_errors")
    expected = {
        "enqueue": 0,
        "working": 0,
        "finish": JOBS_TOTAL - len(BAD_ROWS),
        "failed": len(BAD_ROWS),
        "error": 0,
        "cancelled": 0,
        "stopped": 0,
        "lost": 0,
    }
    for status, count in expected.items():
        expect(page.locator(f"#count-{status}")).to_have_text(str(count))
    expect(page.locator("#done")).to_have_text(f"{JOBS_TOTAL} of {JOBS_TOTAL} jobs done")

    # The task's first 10 failed events: all of them here, with message and the chunk's size.
    errors = page.locator("#errors li")
    expect(errors).to_have_count(len(BAD_ROWS), timeout=LIVE_TIMEOUT)
    for row in BAD_ROWS:
        expect(page.locator("#errors")).to_contain_text(f"price must be positive for SKU SKU-{row:04d}")
    expect(errors.first.locator("summary")).to_have_text(f"{CHUNK_SIZE} items")
    expect(errors.first.locator(".badge")).to_have_text("failed")
    expect(errors.first).to_contain_text("attempt 1")
    expect(page.locator("#cancel")).to_be_disabled()
    expect(page.locator("#tasks")).to_contain_text(task_id)
    expect(page.locator("#live-mode")).to_have_text("")  # the stream said "end"

    # Retry runs the failed jobs again (they fail again); the page follows the task anew on a
    # second stream of the same server process, to its new end.
    page.click("#retry")
    expect(page.locator("#api-error")).to_be_hidden()
    retried = page.locator("#errors li", has_text="attempt 2")
    expect(retried).to_have_count(len(BAD_ROWS), timeout=LIVE_TIMEOUT)
    expect(page.locator("#live-mode")).to_have_text("", timeout=LIVE_TIMEOUT)
    expect(page.locator("#status")).to_have_text("finished_with_errors")
    expect(progress).to_have_text("100%")
    expect(page.locator("#count-finish")).to_have_text(str(JOBS_TOTAL - len(BAD_ROWS)))
    expect(page.locator("#count-failed")).to_have_text(str(len(BAD_ROWS)))
    return task_id


# --- the example page, one behaviour a test, on one stack shared by the module -------------------


@pytest.fixture(scope="module")
def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One worker and API server for the tests below: each makes its own tasks, and starting the
    servers costs more than any of them."""
    namespace = f"attest-{uuid.uuid4().hex[:12]}"
    try:
        with running_stack(namespace, tmp_path_factory.mktemp("page")) as running:
            yield running
    finally:
        conn = redis.Redis.from_url(REDIS_URL)
        keys = list(conn.scan_iter(match=f"{namespace}:*", count=1000))
        if keys:
            conn.unlink(*keys)
        conn.close()


@contextmanager
def recording_page(chromium: Path) -> Iterator[Page]:
    """A fresh Chromium page (empty localStorage) that records content-policy violations; live
    updates get their time."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            opened = browser.new_page(viewport={"width": 1100, "height": 900})
            opened.set_default_timeout(LIVE_TIMEOUT)
            opened.add_init_script(RECORD_POLICY_VIOLATIONS)
            yield opened
        finally:
            browser.close()


@pytest.fixture
def page(chromium: Path, shared_stack: Stack, tmp_path: Path) -> Iterator[Page]:
    """A fresh browser page on the example page, recording policy violations; its last look is
    saved in the test's tmp_path."""
    with recording_page(chromium) as opened:
        opened.goto(shared_stack.base_url + "/")
        yield opened
        opened.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        assert opened.evaluate("[...window.policyViolations]") == []


def connect(page: Page, stack: Stack) -> None:
    page.fill("#token", stack.token)
    page.click("#load-jobs")
    expect(page.locator('#job option[value="import_products"]')).to_have_count(1)
    page.select_option("#job", "import_products")


def upload(page: Page, rows: list[tuple[str, ...]], chunk_size: int, header: str = "sku,name,price") -> None:
    body = "\n".join([header, *(",".join(row) for row in rows)]) + "\n"
    page.set_input_files(
        "#file", files=[{"name": "rows.csv", "mimeType": "text/csv", "buffer": body.encode()}]
    )
    page.fill("#chunk-size", str(chunk_size))
    page.click("#submit")


def wait_end(page: Page, timeout: float = LIVE_TIMEOUT) -> None:
    expect(page.locator("#status")).to_have_text(re.compile("^finished"), timeout=timeout)
    expect(page.locator("#live-mode")).to_have_text("")  # the stream said "end"


def test_page_without_a_token_asks_for_one_without_an_error(shared_stack: Stack, page: Page) -> None:
    # The note shows once the jobs list answered 401: the page's answer to that is in place.
    expect(page.locator("#connect-note")).to_be_visible()
    expect(page.locator("#connect-note")).to_contain_text("Enter your API token")
    expect(page.locator("#api-error")).to_be_hidden()
    # A token that is typed and wrong is an error.
    page.fill("#token", "atk_wrong")
    page.click("#load-jobs")
    expect(page.locator("#api-error")).to_contain_text("401 unauthorized")
    expect(page.locator("#connect-note")).to_be_hidden()
    connect(page, shared_stack)
    expect(page.locator("#api-error")).to_be_hidden()


#: After each change of the task panel: the recent tasks' row of that task, next to the panel.
RECORD_ROW_AND_PANEL = """
window.rowVersusPanel = [];
document.addEventListener("DOMContentLoaded", () => {
  const compare = () => {
    const id = document.getElementById("task-id").textContent;
    const row = [...document.getElementById("tasks").rows].find((tr) => tr.cells[0].textContent === id);
    const panel = [document.getElementById("status").textContent,
                   document.getElementById("progress-text").textContent];
    const cells = row ? [row.cells[2].textContent, row.cells[3].textContent] : null;
    window.rowVersusPanel.push({ panel, row: cells });
  };
  new MutationObserver(compare).observe(document.getElementById("task"), { subtree: true, childList: true,
    characterData: true, attributes: true, attributeFilter: ["aria-valuenow"] });
});
"""


def test_recent_tasks_agree_with_the_task_panel_while_it_runs(shared_stack: Stack, page: Page) -> None:
    page.add_init_script(RECORD_ROW_AND_PANEL)
    page.reload()
    connect(page, shared_stack)
    upload(page, [(f"R{i:03d}", f"Row {i}", "1.00") for i in range(200)], chunk_size=2)
    expect(page.locator("#progress")).to_have_text("100%", timeout=LIVE_TIMEOUT)
    wait_end(page)
    seen: list[dict[str, Any]] = page.evaluate("[...window.rowVersusPanel]")
    listed = [s for s in seen if s["row"] is not None]
    running = [s for s in listed if s["panel"][0] == "running"]
    assert running, seen  # the list showed the task while it ran
    assert [s for s in listed if s["row"] != s["panel"]] == []
    row = page.locator("#tasks tr", has_text=page.locator("#task-id").inner_text())
    expect(row).to_contain_text("finished")
    expect(row).to_contain_text("100%")


def test_failed_jobs_are_one_line_each_with_their_items_on_demand(shared_stack: Stack, page: Page) -> None:
    connect(page, shared_stack)
    # Rows 4 and 10 have a negative price: the 2nd and 4th chunks of 3 fail.
    rows = [(f"F{i:03d}", f"Thing {i}", "-1.00" if i in (4, 10) else "2.50") for i in range(12)]
    upload(page, rows, chunk_size=3)
    wait_end(page)
    failed = page.locator("#errors > li")
    expect(failed).to_have_count(2)
    first = failed.first
    expect(first.locator(".message")).to_have_text("price must be positive for SKU F004")
    expect(first.locator("summary")).to_have_text("3 items")
    # No raw JSON of the chunk: the items are in the closed details box, read when it opens.
    assert "{" not in page.locator("#errors").inner_text()
    expect(first.locator(".failure-details")).to_have_count(0)
    first.locator("summary").click()
    table = first.locator(".failure-details table.items")
    expect(table.locator("th")).to_have_text(["sku", "name", "price"])
    expect(table.locator("tbody tr")).to_have_count(3)
    expect(table.locator("tbody tr").nth(1)).to_have_text(re.compile(r"F004\s*Thing 4\s*-1\.00"))
    expect(first.locator(".failure-details .log")).to_contain_text(
        "failed: price must be positive for SKU F004"
    )


def test_a_failure_message_with_unstorable_characters_shows_them_escaped(
    shared_stack: Stack, page: Page
) -> None:
    connect(page, shared_stack)
    upload(page, [("B001", "binary", "1.00"), ("B002", "fine", "1.00")], chunk_size=1)
    wait_end(page)
    expect(page.locator("#errors > li .message")).to_have_text(
        ["unreadable field \\udcff\\u0000 in SKU B001"]
    )
    expect(page.locator("#status")).to_have_text("finished_with_errors")


def test_show_more_pages_through_every_failed_job(shared_stack: Stack, page: Page) -> None:
    connect(page, shared_stack)
    bad = list(range(3, 28))  # 25 failing rows, one job each
    upload(
        page, [(f"M{i:03d}", f"Item {i}", "-1.00" if i in bad else "3.00") for i in range(30)], chunk_size=1
    )
    wait_end(page)
    failed = page.locator("#errors > li")
    more = page.locator("#more-errors")
    expect(failed).to_have_count(10)
    expect(page.locator("#errors-note")).to_have_text("Showing 10 of 25.")
    # A control, not an API address to type somewhere.
    assert "/api/" not in page.locator("#task").inner_text()
    expect(more).to_have_text("Show 10 more")
    more.click()
    expect(failed).to_have_count(20)
    expect(more).to_have_text("Show 5 more")
    more.click()
    expect(failed).to_have_count(25)
    expect(more).to_be_hidden()
    expect(page.locator("#errors-note")).to_have_text("")
    # Each failed job once, in the order they were created.
    expect(page.locator("#errors > li .message")).to_have_text(
        [f"price must be positive for SKU M{i:03d}" for i in bad]
    )


def test_a_csv_without_a_column_names_its_lines_and_the_column(shared_stack: Stack, page: Page) -> None:
    connect(page, shared_stack)
    upload(page, [("A1", "9.90"), ("A2", "4.50")], chunk_size=1, header="sku,price")
    error = page.locator("#api-error")
    expect(error).to_contain_text("validation_failed")
    expect(error.locator("li")).to_have_text(
        [f'line {line}, column "name": "name" is a required property' for line in (2, 3)]
    )
    expect(page.locator("#task")).to_be_hidden()


def test_a_fed_task_is_paused_tuned_and_resumed_from_the_page(shared_stack: Stack, page: Page) -> None:
    connect(page, shared_stack)
    page.fill("#parallel", "1")
    upload(page, [(f"P{i:03d}", f"Part {i}", "1.00") for i in range(300)], chunk_size=1)
    expect(page.locator("#feed-summary")).to_be_visible()
    expect(page.locator("#feed-state")).to_have_text("releasing")
    expect(page.locator("#feed-parallel-now")).to_have_text("1")
    expect(page.locator("#feed-parallel")).to_have_value("1")
    page.click("#pause")
    expect(page.locator("#feed-state")).to_have_text("paused")
    expect(page.locator("#eta")).to_have_text("paused")
    expect(page.locator("#pause")).to_be_disabled()
    # Paused: what is held stays held. The count shown at the click may be a refresh older than
    # the pause: read it once two readings a second apart agree.
    held = int(page.locator("#held").inner_text())
    for _ in range(10):
        page.wait_for_timeout(1000)
        shown = int(page.locator("#held").inner_text())
        if shown == held:
            break
        held = shown
    assert held > 0
    page.wait_for_timeout(1000)
    expect(page.locator("#held")).to_have_text(str(held))
    page.fill("#feed-parallel", "6")
    page.fill("#feed-priority", "-1")
    page.click("#feed-apply")
    expect(page.locator("#feed-parallel-now")).to_have_text("6")
    expect(page.locator("#feed-priority-now")).to_have_text("-1")
    page.click("#resume")
    expect(page.locator("#feed-state")).to_have_text("releasing")
    # 300 jobs released six at a time: on a loaded machine the drain takes longer than a refresh.
    wait_end(page, timeout=3 * LIVE_TIMEOUT)
    expect(page.locator("#feed-state")).to_have_text("ended")
    expect(page.locator("#held")).to_have_text("0")
    expect(page.locator("#resume")).to_be_disabled()
    expect(page.locator("#feed-apply")).to_be_disabled()
    task = shared_stack.get(f"/api/tasks/{page.locator('#task-id').inner_text()}")
    assert task["feed"] == {"parallel": 6, "interval": 0.0, "priority": -1, "paused": False, "held": 0}
    assert task["counts"]["finish"] == 300


def test_an_unfed_task_shows_no_feed_controls(shared_stack: Stack, page: Page) -> None:
    connect(page, shared_stack)
    upload(page, [("U1", "One", "1.00")], chunk_size=1)
    wait_end(page)
    for hidden in ("#feed-summary", "#feed-form", "#pause", "#resume"):
        expect(page.locator(hidden)).to_be_hidden()


def test_the_items_that_failed_in_their_chunks_are_listed_with_their_messages(
    shared_stack: Stack, page: Page
) -> None:
    page.fill("#token", shared_stack.token)
    page.click("#load-jobs")
    expect(page.locator('#job option[value="sign_up_products"]')).to_have_count(1)
    page.select_option("#job", "sign_up_products")
    bad = {n for n in range(2000) if n % 100 == 37}
    upload(page, [(f"S{n:04d}", f"Item {n}", "-1" if n in bad else "3") for n in range(2000)], chunk_size=50)
    wait_end(page)
    expect(page.locator("#status")).to_have_text("finished_with_errors")
    expect(page.locator("#done")).to_have_text("2000 of 2000 items run (20 failed) · 40 of 40 jobs done")
    expect(page.locator("#errors > li")).to_have_count(0)
    items = page.locator("#failed-items > li")
    expect(items).to_have_count(len(bad))
    expect(page.locator("#items-note")).to_have_text("20 items failed.")
    shown = sorted(items.locator(".message").all_inner_texts())
    assert shown == sorted(f"price must be positive for SKU S{n:04d}" for n in bad)
    expect(items.first.locator(".item")).to_contain_text('"sku":"S0037"')
    expect(page.locator("#more-items")).to_be_hidden()
