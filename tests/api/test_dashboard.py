"""The dashboard over the Flask test client on each broker: who may see it, how its forms are
protected, that every page renders what the broker holds, and that each action changes the broker."""

from __future__ import annotations

import html
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Engine

import asynctask
from asynctask import JobFailed, Registry, payload
from asynctask.api import DeadSet, Queue, RetrySet, ScheduledSet, Stats, StoppedSet
from asynctask.middleware import Chain, TrackingServerMiddleware
from asynctask.settings import QueueSpec
from asynctask.tasks.service import Tracking
from asynctask.tokens import create_token, revoke_token
from asynctask.tracking.isolate import set_aside
from asynctask.worker import Worker
from tests.api.stores import Store
from tests.conftest import wait_until
from webapi import create_app
from webapi.config import ApiConfig
from webapi.resources import EXTENSION

HOSTILE = "<img src=x onerror=alert(1)>"


@dataclass
class Dashboard:
    app: Flask
    http: FlaskClient
    engine: Engine
    store: Store
    operator: str
    operator_id: str
    tenant: str

    def login(self, token: str | None = None) -> None:
        page = self.http.get("/dashboard/login").get_data(as_text=True)
        response = self.http.post(
            "/dashboard/login", data={"token": token or self.operator, "csrf_token": csrf(page)}
        )
        assert response.status_code == 303, response.get_data(as_text=True)

    def page(self, url: str) -> str:
        response = self.http.get(url)
        assert response.status_code == 200, (url, response.status_code)
        return response.get_data(as_text=True)

    def status(self, url: str, **form: str) -> int:
        """The status of a POST of ``form`` as it is (no CSRF token added)."""
        return self.http.post(url, data=form).status_code

    def on_entry(self, name: str, action: str, key: str) -> str:
        """Act on one entry of a set's page, as its checkbox and button would."""
        return self.act(f"/dashboard/sets/{name}", f"/dashboard/sets/{name}", action=action, entry=key)

    def act(self, url: str, page: str, **form: str | list[str]) -> str:
        """Submit a form of ``page`` (its CSRF token) and return the page it leads back to."""
        response = self.http.post(url, data={"csrf_token": csrf(self.page(page)), **form})
        assert response.status_code == 303, (url, response.status_code, response.get_data(as_text=True))
        return self.page(response.headers["Location"])


def csrf(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found is not None, "the page has no CSRF token"
    return found.group(1)


@pytest.fixture
def board(store: Store, tracking: Tracking) -> Dashboard:
    client, engine = tracking.client, tracking.engine
    operator = create_token(engine, "ops", operator=True)
    tenant = create_token(engine, "acme").token
    app = create_app({"settings": client.settings, "token_cache_seconds": 0.0}, client=client, engine=engine)
    app.testing = True
    return Dashboard(app, app.test_client(), engine, store, operator.token, operator.id, tenant)


@pytest.fixture
def start_board_worker(board: Dashboard, start_redis_worker: Callable[..., Worker]) -> Callable[..., Worker]:
    """A tracked worker on the dashboard's broker and tracking database, taking ``queues``."""
    settings = board.app.extensions[EXTENSION].client.settings

    def start(*queues: str) -> Worker:
        return start_redis_worker(
            broker_url=settings.broker_url,
            database_url=settings.database_url,
            queues=tuple(QueueSpec(queue) for queue in queues),
            server_middleware=Chain([TrackingServerMiddleware()]),
        )

    return start


def hostile_job(jid: str, queue: str = "default") -> payload.JobDict:
    return {
        "class": "HardJob",
        "args": [HOSTILE, {"note": HOSTILE}],
        "queue": queue,
        "jid": jid,
        "retry": True,
        "created_at": 1700000000.0,
        "enqueued_at": 1700000000.0,
        "error_message": HOSTILE,
        "error_class": "RuntimeError",
        "retry_count": 1,
    }


def test_a_browser_without_a_session_is_sent_to_the_login_and_a_form_gets_401(board: Dashboard) -> None:
    response = board.http.get("/dashboard/queues")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/dashboard/login?next=/dashboard/queues")
    assert board.http.post("/dashboard/queues/default/pause").status_code == 401


def test_a_tenant_token_gets_403_by_header_and_at_the_login(board: Dashboard) -> None:
    headers = {"Authorization": f"Bearer {board.tenant}"}
    assert board.http.get("/dashboard/", headers=headers).status_code == 403
    page = board.http.get("/dashboard/login").get_data(as_text=True)
    refused = board.http.post("/dashboard/login", data={"token": board.tenant, "csrf_token": csrf(page)})
    assert refused.status_code == 403
    assert board.http.get("/dashboard/").status_code == 302
    assert (
        board.http.get("/dashboard/", headers={"Authorization": f"Bearer {board.operator}"}).status_code
        == 200
    )


def test_the_login_keeps_a_signed_httponly_strict_cookie_that_a_revocation_ends(board: Dashboard) -> None:
    page = board.http.get("/dashboard/login").get_data(as_text=True)
    response = board.http.post("/dashboard/login", data={"token": board.operator, "csrf_token": csrf(page)})
    assert response.status_code == 303
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/dashboard" in cookie
    # The cookie holds the token's hash at most, never the token.
    assert board.operator not in cookie
    assert board.page("/dashboard/")
    revoke_token(board.engine, board.operator_id)
    assert board.http.get("/dashboard/").status_code == 302


def test_a_wrong_token_or_a_forged_login_form_is_refused(board: Dashboard) -> None:
    page = board.http.get("/dashboard/login").get_data(as_text=True)
    assert (
        board.http.post("/dashboard/login", data={"token": "atk_nope", "csrf_token": csrf(page)}).status_code
        == 401
    )
    assert board.http.post("/dashboard/login", data={"token": board.operator}).status_code == 403
    assert board.http.get("/dashboard/").status_code == 302


def test_the_login_goes_back_only_to_a_dashboard_page(board: Dashboard) -> None:
    for wanted, landing in [
        ("/dashboard/queues", "/dashboard/queues"),
        ("//evil.example/dashboard", "/dashboard/"),
        ("https://evil.example/", "/dashboard/"),
        ("/api/tasks", "/dashboard/"),
    ]:
        page = board.http.get("/dashboard/login").get_data(as_text=True)
        response = board.http.post(
            "/dashboard/login", data={"token": board.operator, "csrf_token": csrf(page), "next": wanted}
        )
        assert response.headers["Location"] == landing


def test_a_change_without_the_csrf_token_or_from_another_site_is_refused(board: Dashboard) -> None:
    board.store.push(hostile_job("a" * 24))
    board.login()
    token = csrf(board.page("/dashboard/queues"))
    url = "/dashboard/queues/default/pause"
    assert board.http.post(url).status_code == 403
    assert board.status(url, csrf_token="forged") == 403
    other_site = {"Origin": "https://evil.example"}
    assert board.http.post(url, data={"csrf_token": token}, headers=other_site).status_code == 403
    # A browser under no-referrer sends "Origin: null"; where the form came from is in Sec-Fetch-Site.
    cross_site = {"Origin": "null", "Sec-Fetch-Site": "cross-site"}
    assert board.http.post(url, data={"csrf_token": token}, headers=cross_site).status_code == 403
    same_site = {"Origin": "null", "Sec-Fetch-Site": "same-origin"}
    assert board.http.post(url, data={"csrf_token": "forged"}, headers=same_site).status_code == 403
    assert not _queue(board, "default").paused
    accepted = board.http.post(url, data={"csrf_token": token}, headers=same_site)
    assert accepted.status_code == 303
    assert _queue(board, "default").paused


def test_every_page_shows_a_jobs_hostile_text_as_text(board: Dashboard) -> None:
    board.store.push(hostile_job("q" * 24))
    board.store.add("retry", hostile_job("r" * 24), 1700000100.0)
    board.store.add("dead", hostile_job("d" * 24), 1700000200.0)
    board.store.add("schedule", hostile_job("s" * 24), 4000000000.0)
    board.store.add("stopped", hostile_job("t" * 24), 1700000300.0)
    board.store.process("host:1:abc", busy=1, work={"1": payload.dumps(_work("w" * 24))})
    board.login()
    escaped = "&lt;img src=x onerror=alert(1)&gt;"
    for url, jid in [
        ("/dashboard/queues/default", "q"),
        ("/dashboard/sets/retry", "r"),
        ("/dashboard/sets/dead", "d"),
        ("/dashboard/sets/scheduled", "s"),
        ("/dashboard/sets/stopped", "t"),
        ("/dashboard/processes", "w"),
    ]:
        text = board.page(url)
        assert jid * 24 in text, url
        assert HOSTILE not in text, url
        assert escaped in text, url
    for url in ["/dashboard/", "/dashboard/queues", "/dashboard/tasks", "/dashboard/periodic"]:
        board.page(url)


def _work(jid: str) -> dict[str, object]:
    return {"queue": "default", "payload": payload.dumps(hostile_job(jid)), "run_at": 1700000000}


def test_the_sets_actions_change_the_broker(board: Dashboard) -> None:
    board.store.add("retry", hostile_job("r1" * 12), 1700000100.0)
    board.store.add("retry", hostile_job("r2" * 12), 1700000101.0)
    board.store.add("retry", hostile_job("r3" * 12), 1700000102.0)
    board.store.add("dead", hostile_job("d1" * 12), 1700000200.0)
    board.store.add("schedule", hostile_job("s1" * 12), 4000000000.0)
    board.login()
    settings = board.store.settings

    board.act(
        "/dashboard/sets/retry", "/dashboard/sets/retry", action="retry", entry=f"1700000100.0|{'r1' * 12}"
    )
    assert [job["jid"] for job in board.store.queued()] == ["r1" * 12]
    assert RetrySet(settings=settings).find_job("r1" * 12) is None

    board.act(
        "/dashboard/sets/retry", "/dashboard/sets/retry", action="kill", entry=f"1700000101.0|{'r2' * 12}"
    )
    assert DeadSet(settings=settings).find_job("r2" * 12) is not None

    board.act(
        "/dashboard/sets/dead", "/dashboard/sets/dead", action="delete", entry=f"1700000200.0|{'d1' * 12}"
    )
    assert DeadSet(settings=settings).find_job("d1" * 12) is None

    board.act(
        "/dashboard/sets/scheduled",
        "/dashboard/sets/scheduled",
        action="enqueue",
        entry=f"4000000000.0|{'s1' * 12}",
    )
    assert ScheduledSet(settings=settings).size == 0

    # Bulk: every entry of the dead set (r2 now) back to its queue.
    board.act("/dashboard/sets/dead", "/dashboard/sets/dead", action="retry", all="1")
    assert DeadSet(settings=settings).size == 0
    assert sorted(job["jid"] for job in board.store.queued()) == sorted(["r1" * 12, "r2" * 12, "s1" * 12])
    # A selection of several, then a search that finds one.
    assert RetrySet(settings=settings).size == 1
    searched = board.page(f"/dashboard/sets/retry?q={'r3' * 12}")
    assert "r3" * 12 in searched
    assert "r1" * 12 not in board.page("/dashboard/sets/retry?q=nothing-like-it")


def test_a_stale_or_unknown_entry_is_not_acted_on(board: Dashboard) -> None:
    board.store.add("retry", hostile_job("r1" * 12), 1700000100.0)
    board.login()
    page = board.act(
        "/dashboard/sets/retry", "/dashboard/sets/retry", action="delete", entry=f"1700000100.5|{'r1' * 12}"
    )
    assert "0 of 1 entries (1 no longer there)" in page
    assert RetrySet(settings=board.store.settings).size == 1
    token = csrf(board.page("/dashboard/sets/retry"))
    assert (
        board.http.post("/dashboard/sets/retry", data={"csrf_token": token, "action": "explode"}).status_code
        == 400
    )
    assert (
        board.http.post("/dashboard/sets/nothing", data={"csrf_token": token, "action": "delete"}).status_code
        == 404
    )
    bad = board.http.post(
        "/dashboard/sets/retry", data={"csrf_token": token, "action": "delete", "entry": "x|y"}
    )
    assert bad.status_code == 400
    assert board.http.get("/dashboard/sets/retry?page=0").status_code == 400


def test_the_queue_actions_change_the_broker(board: Dashboard) -> None:
    board.store.push(hostile_job("a" * 24, "imports"), "imports")
    board.store.push(hostile_job("b" * 24, "imports"), "imports")
    board.login()
    page = board.act("/dashboard/queues/imports/pause", "/dashboard/queues")
    assert _queue(board, "imports").paused
    assert "paused" in page
    board.act("/dashboard/queues/imports/resume", "/dashboard/queues")
    assert not _queue(board, "imports").paused
    board.act("/dashboard/queues/imports/delete", "/dashboard/queues/imports", jid="a" * 24)
    assert [job["jid"] for job in board.store.queued("imports")] == ["b" * 24]
    board.act("/dashboard/queues/imports/clear", "/dashboard/queues")
    assert board.store.queued("imports") == []


def test_quiet_and_stop_reach_the_process(board: Dashboard) -> None:
    board.store.process("host:1:abc")
    board.login()
    board.act("/dashboard/processes/host:1:abc/quiet", "/dashboard/processes")
    board.act("/dashboard/processes/host:1:abc/stop", "/dashboard/processes")
    assert board.store.signals("host:1:abc") == ["TSTP", "TERM"]
    token = csrf(board.page("/dashboard/processes"))
    assert (
        board.http.post("/dashboard/processes/host:9:none/stop", data={"csrf_token": token}).status_code
        == 404
    )
    assert (
        board.http.post("/dashboard/processes/host:1:abc/explode", data={"csrf_token": token}).status_code
        == 404
    )


def test_a_stopped_job_is_resumed_from_its_set(board: Dashboard) -> None:
    board.store.add("stopped", hostile_job("t" * 24, "long"), 1700000300.0)
    board.login()
    board.act(
        "/dashboard/sets/stopped",
        "/dashboard/sets/stopped",
        action="resume",
        entry=f"1700000300.0|{'t' * 24}",
    )
    assert StoppedSet(settings=board.store.settings).size == 0
    assert [job["jid"] for job in board.store.queued("long")] == ["t" * 24]


def _queue(board: Dashboard, name: str) -> Queue:
    settings = board.store.settings
    if settings.broker_url.startswith("redis"):
        conn = redis.Redis.from_url(settings.broker_url)
        return Queue(name, conn, settings=settings)
    return Queue(name, settings=settings)


def test_a_login_holds_on_every_process_that_shares_the_secret_key(store: Store, tracking: Tracking) -> None:
    if store.kind != "redis":
        pytest.skip("the cookie does not depend on the broker")
    client, engine = tracking.client, tracking.engine
    operator = create_token(engine, "ops", operator=True).token
    apps = [
        create_app({"settings": client.settings, "secret_key": key}, client=client, engine=engine)
        for key in ("k" * 32, "k" * 32, "x" * 32)
    ]
    first, same_key, other_key = (app.test_client() for app in apps)
    page = first.get("/dashboard/login").get_data(as_text=True)
    assert (
        first.post("/dashboard/login", data={"token": operator, "csrf_token": csrf(page)}).status_code == 303
    )
    cookie = first.get_cookie("asynctask_dashboard", path="/dashboard")
    assert cookie is not None
    for http in (same_key, other_key):
        http.set_cookie("asynctask_dashboard", cookie.value, path="/dashboard")
    assert same_key.get("/dashboard/").status_code == 200
    assert other_key.get("/dashboard/").status_code == 302


def test_a_short_secret_key_is_refused() -> None:
    with pytest.raises(ValueError, match="secret_key"):
        ApiConfig.from_env({"ASYNCTASK_API_SECRET_KEY": "short"})
    assert ApiConfig.from_env({"ASYNCTASK_API_SECRET_KEY": "s" * 32}).secret_key == "s" * 32
    assert ApiConfig.from_env({"ASYNCTASK_API_SESSION_HOURS": "2"}).session_hours == 2.0


def test_transitions_set_aside_are_listed_with_their_bytes_counted_on_the_overview_and_in_metrics(
    board: Dashboard,
) -> None:
    board.login()
    assert "Set aside</span>" not in board.page("/dashboard/")
    assert "Nothing set aside." in board.page("/dashboard/set-aside")
    with board.engine.begin() as connection:
        set_aside(
            connection,
            [(HOSTILE, f'["{HOSTILE}","progress",1.0,null,{2**70}]'.encode(), "numeric out of range")],
        )
    listed = board.page("/dashboard/set-aside")
    assert "numeric out of range" in listed and str(2**70) in listed
    assert HOSTILE not in listed and "&lt;img src=x" in listed
    assert re.search(r'id="set-aside">1<', board.page("/dashboard/"))
    metrics = board.http.get("/metrics", headers={"Authorization": f"Bearer {board.operator}"})
    assert "asynctask_tracking_set_aside 1.0" in metrics.get_data(as_text=True)


def test_a_queue_and_a_task_that_no_live_worker_listens_to_are_flagged(
    board: Dashboard, registry: Registry
) -> None:
    @asynctask.job(queue="imports", registry=registry)
    def load(rows: list[int]) -> None: ...

    task = board.app.extensions[EXTENSION].tracking.create_task(load, range(4), chunk_size=2)
    board.store.push(hostile_job("a" * 24), "default")
    board.store.process("vm:1:aaaaaaaaaaaa", info={"queues": ["default"]})
    board.login()
    flag = "no worker listens to this queue"
    for url in ("/dashboard/", "/dashboard/queues"):
        page = board.page(url)
        assert flag in _row(page, 'data-queue="imports"'), url
        assert flag not in _row(page, 'data-queue="default"'), url
    assert flag in board.page("/dashboard/queues/imports")
    assert flag not in board.page("/dashboard/queues/default")
    assert flag in _row(board.page("/dashboard/tasks"), f'data-task="{task.id}"')
    assert flag in board.page(f"/dashboard/tasks/{task.id}")

    board.store.process("vm:2:bbbbbbbbbbbb", info={"queues": ["imports"]})
    for url in ("/dashboard/", "/dashboard/queues", "/dashboard/queues/imports", "/dashboard/tasks"):
        assert flag not in board.page(url), url
    assert flag not in board.page(f"/dashboard/tasks/{task.id}")


def _row(page: str, marker: str) -> str:
    """The table row of ``page`` that carries ``marker``."""
    found = re.search(rf"<tr {re.escape(marker)}.*?</tr>", page, re.S)
    assert found is not None, marker
    return found.group(0)


def test_big_arguments_are_shown_cut_with_their_whole_value_a_link_away(
    board: Dashboard, registry: Registry
) -> None:
    @asynctask.job(queue="imports", registry=registry)
    def load(rows: list[dict[str, str]]) -> None: ...

    rows = [{"sku": f"S{i}", "name": HOSTILE + "x" * 200} for i in range(50 * 25)]
    task = board.app.extensions[EXTENSION].tracking.create_task(load, rows, chunk_size=50)
    big = {**hostile_job("b" * 24), "args": [rows[:50]]}
    board.store.add("retry", big, 1700000100.0)
    board.store.process(
        "host:1:abc",
        busy=1,
        work={"1": payload.dumps({**_work("w" * 24), "payload": payload.dumps({**big, "jid": "w" * 24})})},
    )
    board.login()
    whole = len(json.dumps(rows))
    for url in (
        f"/dashboard/tasks/{task.id}",
        "/dashboard/queues/imports",
        "/dashboard/sets/retry",
        "/dashboard/processes",
    ):
        page = board.page(url)
        # 25 chunks of 50 rows a page, each over 11 KB: a line each instead.
        assert len(page) < 60_000 < whole / 5, (url, len(page))
        assert HOSTILE not in page
        links = re.findall(r'<a class="full" href="([^"]+)"', page)
        assert links, url
        full = board.http.get(html.unescape(links[0]))
        assert (full.status_code, full.mimetype) == (200, "application/json"), url
        assert full.get_json()[0] in [rows[n : n + 50] for n in range(0, len(rows), 50)], url
    assert board.http.get(f"/dashboard/tasks/{task.id}/jobs/{'n' * 24}/params").status_code == 404
    assert board.http.get(f"/dashboard/queues/imports/jobs/{'n' * 24}/args").status_code == 404
    assert board.http.get("/dashboard/sets/retry/args?entry=1700000100.0|nothing").status_code == 404
    assert board.http.get(f"/dashboard/processes/jobs/{'n' * 24}/args").status_code == 404
    # A short value is shown whole, with no link.
    board.store.push(hostile_job("s" * 24), "short")
    short = _row(board.page("/dashboard/queues/short"), f'data-jid="{"s" * 24}"')
    assert "&lt;img src=x onerror=alert(1)&gt;" in short and 'class="full"' not in short


def test_the_overview_tells_jobs_that_raised_from_the_failed_jobs_of_tasks(
    board: Dashboard, registry: Registry, start_board_worker: Callable[..., Worker]
) -> None:
    @asynctask.job(queue="imports", registry=registry)
    def check(rows: list[int]) -> None:
        if rows[0] < 0:
            raise JobFailed(f"row {rows[0]} is negative")

    tracking = board.app.extensions[EXTENSION].tracking
    task = tracking.create_task(check, [1, -1, 2], chunk_size=1)
    start_board_worker("imports")
    wait_until(lambda: tracking.get_task(task.id).status == "finished_with_errors", 30)
    stats = Stats(settings=board.store.settings)
    # The counters reach the broker with the worker's heartbeat.
    wait_until(lambda: stats.refresh().processed == 3, 10)
    assert stats.failed == 0

    board.login()
    page = board.page("/dashboard/")
    assert '<span class="label">Failed</span>' not in page
    assert (
        '<span class="label">Jobs run</span><span class="value" id="processed" data-total="3">3</span>'
        in page
    )
    assert (
        '<span class="label">Jobs raised</span><span class="value" id="failed" data-total="0">0</span>'
        in page
    )
    assert (
        '<span class="label">Failed in tasks</span><span class="value" id="failed-in-tasks">1</span>' in page
    )
    raised, failed_in_tasks = (
        re.search(rf'<[a-z]+ class="counter"[^>]* title="([^"]+)"><span class="label">{label}<', page)
        for label in ("Jobs raised", "Failed in tasks")
    )
    assert raised is not None and "JobFailed" in raised.group(1)
    assert failed_in_tasks is not None and "JobFailed" in failed_in_tasks.group(1)


def test_a_fed_task_shows_its_feed_releasing_then_released_then_done_without_controls_at_the_end(
    board: Dashboard, registry: Registry, start_board_worker: Callable[..., Worker]
) -> None:
    gates = [threading.Event() for _ in range(3)]

    @asynctask.job(queue="imports", registry=registry)
    def gated(rows: list[int]) -> None:
        gates[rows[0]].wait(30)

    task = board.app.extensions[EXTENSION].tracking.create_task(gated, range(3), chunk_size=1, parallel=2)
    url = f"/dashboard/tasks/{task.id}"
    board.login()
    try:
        releasing = board.page(url)
        assert 'data-state="releasing"' in releasing and "1 held" in releasing
        assert _feed_controls(releasing) == {"Apply", "Pause feed"}

        start_board_worker("imports")
        # The first job's end releases the last one: every job is out, two of them running.
        gates[0].set()
        released = _page_showing(board, url, 'data-state="released"')
        assert _feed_controls(released) == set()
        assert "held" not in released.partition("<h2>Feed</h2>")[2].partition("<h2>")[0]

        for gate in gates:
            gate.set()
        done = _page_showing(board, url, 'data-state="done"')
        assert "finished" in done and "releasing" not in done
        assert _feed_controls(done) == set()
    finally:
        for gate in gates:
            gate.set()


def _page_showing(board: Dashboard, url: str, text: str) -> str:
    def showing() -> str | None:
        page = board.page(url)
        return page if text in page else None

    found: str = wait_until(showing, 20, interval=0.1)
    return found


def _feed_controls(page: str) -> set[str]:
    """The buttons of the task page's feed section."""
    feed = page.partition("<h2>Feed</h2>")[2].partition("<h2>")[0]
    return set(re.findall(r"<button[^>]*>([^<]+)</button>", feed))


def test_a_task_page_shows_its_callbacks_and_their_state(board: Dashboard, registry: Registry) -> None:
    @asynctask.job(queue="imports", registry=registry)
    def load(rows: list[int]) -> None: ...

    @asynctask.job(registry=registry)
    def report(summary: dict[str, object]) -> None: ...

    tracking = board.app.extensions[EXTENSION].tracking
    task = tracking.create_task(load, range(2), on_complete=report, on_success=report)
    board.login()
    url = f"/dashboard/tasks/{task.id}"
    callbacks = board.page(url).partition("<h2>Callbacks</h2>")[2].partition("</table>")[0]
    states = re.findall(r"<td>on (\w+)</td><td>report</td>.*?callback-state\">(\w+)<", callbacks)
    assert states == [("complete", "waiting"), ("success", "waiting")]
    tracking.cancel_task(task.id)
    callbacks = board.page(url).partition("<h2>Callbacks</h2>")[2].partition("</table>")[0]
    states = re.findall(r"<td>on (\w+)</td><td>report</td>.*?callback-state\">(\w+)<", callbacks)
    assert states == [("complete", "pushed"), ("success", "waiting")]


def test_a_task_page_shows_the_tasks_it_waits_for_and_those_that_wait_for_it(
    board: Dashboard, registry: Registry
) -> None:
    @asynctask.job(registry=registry)
    def stage(rows: list[int]) -> None: ...

    tracking = board.app.extensions[EXTENSION].tracking
    parent = tracking.create_task(stage, range(2))
    child = tracking.create_task(stage, range(2), after=[parent.id], parallel=1)
    board.login()
    page = board.page(f"/dashboard/tasks/{child.id}")
    waits = page.partition("<h2>Waits for</h2>")[2].partition("</table>")[0]
    assert 'Runs if they all succeed: <span class="hold-state">waiting</span>' in waits
    assert re.findall(r"<code>(\w+)</code></a></td><td>stage</td>", waits) == [parent.id]
    # Its feed resumes with its parents' end: no button offers it before.
    assert _feed_controls(page) == {"Apply"}
    children = board.page(f"/dashboard/tasks/{parent.id}").partition("<h2>Waited for by</h2>")[2]
    assert re.findall(
        r"<code>(\w+)</code></a></td><td>stage</td><td class=\"hold-state\">(\w+)<", children
    ) == [(child.id, "waiting")]
    tracking.cancel_task(parent.id)
    page = board.page(f"/dashboard/tasks/{child.id}")
    assert "cancelled: task " + parent.id + " ended cancelled" in page
