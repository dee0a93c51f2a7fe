"""The example page following a task whose jobs RQ runs: headless Chromium against a real API
server (``asynctask api -r tests.integrations.rq_jobs``) and a real ``rq worker`` with the tracked
worker class, a real token, tracking in a fresh PostgreSQL schema."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.integrations.rq_support import ROOT, rq_stack
from tests.processes import free_port
from tests.webapi.conftest import CHROMIUM
from tests.webapi.test_browser import CHROMIUM_ARGS, LIVE_TIMEOUT, cli, wait_ready

#: 12 items: 2 refused (JobFailed), 2 crashing every time (retried twice by RQ), 8 fine.
ITEMS = [{"n": n, "kind": "failed" if n in (2, 7) else "error" if n in (4, 9) else "ok"} for n in range(12)]


@pytest.fixture
def served(claimed_db: int, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The API's base URL and a tenant's token, once the API answers ready."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (Debian package chromium)")
    with rq_stack(claimed_db, tmp_path) as stack:
        env = stack.env(ASYNCTASK_API_AUTH="on", ASYNCTASK_API_STREAM_INTERVAL="0.2")
        token = cli(env, "tokens", "create", "--tenant", "t1", "--label", "rq page").splitlines()[0].strip()
        port = free_port()
        command = [sys.executable, "-m", "asynctask", "api", "--host", "127.0.0.1", "--port", str(port)]
        command += ["--workers", "1", "-r", "tests.integrations.rq_jobs"]
        log = tmp_path / "api.log"
        with log.open("wb") as out:
            api = subprocess.Popen(
                command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        stack.procs.append(api)
        stack.spawn_worker()
        wait_ready(f"http://127.0.0.1:{port}", [api], [log])
        yield f"http://127.0.0.1:{port}", token


def test_the_page_follows_an_rq_task_to_its_end_with_its_failures(
    served: tuple[str, str], tmp_path: Path
) -> None:
    base_url, token = served
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.set_default_timeout(30_000)
            page.goto(base_url + "/")
            page.fill("#token", token)
            page.click("#load-jobs")
            expect(page.locator('#job option[value="rq_mixed"]')).to_have_count(1)
            page.select_option("#job", "rq_mixed")
            expect(page.locator("#job-description")).to_contain_text("Process items")
            page.fill("#items-json", json.dumps(ITEMS))
            page.fill("#chunk-size", "1")
            page.click("#submit")

            expect(page.locator("#progress")).to_have_text("100%", timeout=LIVE_TIMEOUT)
            expect(page.locator("#status")).to_have_text("finished_with_errors")
            for status, count in {"finish": 8, "failed": 2, "error": 2, "enqueue": 0, "working": 0}.items():
                expect(page.locator(f"#count-{status}")).to_have_text(str(count))
            errors = page.locator("#errors li")
            expect(errors).to_have_count(4, timeout=LIVE_TIMEOUT)
            for n in (2, 7):
                expect(page.locator("#errors")).to_contain_text(f"item {n} refused")
            for n in (4, 9):
                expect(page.locator("#errors")).to_contain_text(f"RuntimeError: item {n} broke")
            expect(page.locator("#errors li", has_text="broke").first).to_contain_text("attempt 3")
            page.screenshot(path=str(tmp_path / "rq_page.png"), full_page=True)
        finally:
            browser.close()
