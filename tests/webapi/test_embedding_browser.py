"""The example page in a real browser (Debian's Chromium driven by Playwright, as in
tests/webapi/test_browser.py), served under ``/jobs`` by an app of a team's own
(tests/webapi/hostapp.py) that signs its users in with its own session: no token is typed, the
page's calls carry the app's session cookie, and a task submitted from the page runs in a real
worker until the page shows it done; submitted while no worker takes its queue, the page says so
until one does."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import Engine
from werkzeug.serving import make_server

from asynctask import Client, Registry, Settings
from asynctask.worker import Worker
from tests.webapi.conftest import close_watchers, define_jobs
from tests.webapi.hostapp import PREFIX, host_app
from tests.webapi.test_browser import LIVE_TIMEOUT, recording_page

ITEMS = [{"sku": f"S{i:02d}", "price": "1.50"} for i in range(30)]


@pytest.fixture
def unattended(
    chromium: Path,
    registry: Registry,
    tracked_settings: Settings,
    tracked_client: Client,
    database_engine: Engine,
) -> Iterator[str]:
    """The host app on a free port (a threaded server in this process: a progress stream holds a
    thread), with no worker yet; the app's base URL."""
    define_jobs(registry)
    app, _seen = host_app(tracked_settings, tracked_client, database_engine)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()
        close_watchers([app])


@pytest.fixture
def served(unattended: str, start_tracked_worker: Callable[..., Worker]) -> str:
    """``unattended``, with a tracked worker taking the jobs' queue."""
    start_tracked_worker()
    return unattended


@pytest.fixture
def page(chromium: Path) -> Iterator[Page]:
    with recording_page(chromium) as opened:
        yield opened


def submit_items(page: Page) -> None:
    """Submit ``ITEMS`` from the page's form, as JSON, in chunks of 3."""
    page.select_option("#job", "import_products")
    page.check("#source-json")
    page.fill("#items-json", str(ITEMS).replace("'", '"'))
    page.fill("#chunk-size", "3")
    page.click("#submit")


# One database is enough: what is tested is the page under a prefix, not the tracking store.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_page_under_a_prefix_follows_a_task_with_the_apps_session(
    served: str, page: Page, tmp_path: Path
) -> None:
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url.removeprefix(served)))

    # The app's own login, then the page: no token typed, the jobs load at once.
    page.goto(f"{served}/login?user=ann")
    page.goto(f"{served}{PREFIX}/")
    expect(page.locator('#job option[value="import_products"]')).to_have_count(1)
    expect(page.locator("#connect-note")).to_be_hidden()
    expect(page.locator("#api-error")).to_be_hidden()
    assert page.locator("#token").input_value() == ""

    submit_items(page)
    expect(page.locator("#progress")).to_have_text("100%", timeout=LIVE_TIMEOUT)
    expect(page.locator("#status")).to_have_text("finished")
    expect(page.locator("#done")).to_have_text("10 of 10 jobs done")
    expect(page.locator("#live-mode")).to_have_text("")  # the stream said "end"
    task_id = page.locator("#task-id").inner_text()
    expect(page.locator("#tasks")).to_contain_text(task_id)
    page.screenshot(path=str(tmp_path / "embedded_page.png"), full_page=True)
    assert page.evaluate("[...window.policyViolations]") == []

    # Every file and call of the page went under the prefix; the progress came by the stream.
    assert [url for url in urls if not url.startswith(f"{PREFIX}/")] == ["/login?user=ann"]
    assert f"{PREFIX}/static/app.js" in urls and f"{PREFIX}/api/jobs" in urls
    assert f"{PREFIX}/api/tasks/{task_id}/stream" in urls


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_page_warns_of_a_task_no_worker_takes_until_one_does(
    unattended: str, start_tracked_worker: Callable[..., Worker], page: Page
) -> None:
    page.goto(f"{unattended}/login?user=ann")
    page.goto(f"{unattended}{PREFIX}/")
    submit_items(page)
    expect(page.locator("#task-warning")).to_have_text(
        "Warning: no live worker listens to queue 'default'; the jobs wait until one does."
    )
    expect(page.locator("#status")).to_have_text("pending")

    # A worker comes: the jobs that waited run, and the warning goes.
    start_tracked_worker()
    expect(page.locator("#status")).to_have_text("finished")
    expect(page.locator("#task-warning")).to_be_hidden()
    assert page.evaluate("[...window.policyViolations]") == []
