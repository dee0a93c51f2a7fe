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
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.conftest import REDIS_URL

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "jobs" / "api_jobs.py"
CHROMIUM = Path("/usr/bin/chromium")
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
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

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
    done = subprocess.run(
        [sys.executable, "-m", "asynctask", *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"asynctask {' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
        except (urllib.error.URLError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            fail_with_logs("the API server did not become ready", logs)
        time.sleep(0.1)


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
def chromium() -> Path:
    """Debian's Chromium, checked before any server starts."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (Debian package chromium)")
    return CHROMIUM


@pytest.fixture
def stack(chromium: Path, namespace: str, tmp_path: Path) -> Iterator[Stack]:
    """A worker and an API server (subprocesses) over a fresh namespace and SQLite database."""
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
    port = free_port()
    commands = {
        "worker": ["worker", "-r", str(JOBS), "-c", "2", "-t", "2"],
        "api": ["api", "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "-r", str(JOBS)],
    }
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    try:
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
        base_url = f"http://127.0.0.1:{port}"
        wait_ready(base_url, procs, logs)
        stack = Stack(base_url, token, logs)
        stack.warm_up()
        yield stack
    finally:
        for proc in procs:
            stop(proc)


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
            task_id = drive_page(page, stack)
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
    page.goto(stack.base_url + "/")
    # Without a token the jobs list cannot load: the error box says why.
    expect(page.locator("#api-error")).to_contain_text("unauthorized")

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
    }
    for status, count in expected.items():
        expect(page.locator(f"#count-{status}")).to_have_text(str(count))
    expect(page.locator("#done")).to_have_text(f"{JOBS_TOTAL} of {JOBS_TOTAL} jobs done")

    # The task's first 10 failed events: all of them here, with message and the chunk of rows.
    errors = page.locator("#errors li")
    expect(errors).to_have_count(len(BAD_ROWS), timeout=LIVE_TIMEOUT)
    for row in BAD_ROWS:
        expect(page.locator("#errors")).to_contain_text(f"price must be positive for SKU SKU-{row:04d}")
    expect(page.locator("#errors")).to_contain_text('"sku":"SKU-0013"')
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
