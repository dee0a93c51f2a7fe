"""``asynctask demo``: a worker and the HTTP API on a local SQLite file, and a sample task.

The demo process migrates the database, makes an API token, starts ``asynctask worker`` and
``asynctask api`` as child processes (each in its own session, so that a Ctrl-C in the
terminal reaches only the demo, which then stops them gracefully), submits the sample task
with ``POST /api/tasks`` and follows it with ``GET /api/tasks/<id>``: the whole system is
exercised the way a user's own front end would use it.

The children get the database's URL and nothing of the caller's ASYNCTASK_* or REDIS_URL
variables: whatever the environment says, the demo touches no server.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO
from urllib.parse import quote

from sqlalchemy.exc import SQLAlchemyError

from asynctask import tokens
from asynctask.db import migrate
from asynctask.db.engine import create_database_engine
from asynctask.demo import jobs
from asynctask.demo.output import Output
from asynctask.demo.progress import ProgressLine, format_duration

#: The API's default limit on items per task.
MAX_ITEMS = 200_000
HOST = "127.0.0.1"
TENANT = "demo"
#: Seconds a TERM gives the worker's busy jobs (its ``-t``); the demo's chunks take 0.1 s.
WORKER_TIMEOUT = 5
#: Seconds a child gets after TERM before its whole process group is killed (gunicorn's
#: graceful timeout is 10 s).
STOP_GRACE = 15.0
#: Seconds the API may take to answer its first request.
STARTUP_TIMEOUT = 60.0
POLL_INTERVAL = 0.25
#: Lines of a child's log shown when it stops on its own.
TAIL_LINES = 15
#: First errors shown in the summary.
SHOWN_ERRORS = 5
#: Task statuses after which nothing more will happen to the task.
DONE_STATUSES = frozenset({"finished", "finished_with_errors", "cancelled", "aborted"})
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class DemoError(Exception):
    """Something the demo needs did not work; the message says what, and where to look."""


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


class Api:
    """The demo's HTTP client: JSON in and out, with the demo tenant's token.

    http.client rather than urllib: urllib would send requests for 127.0.0.1 through a proxy
    named by HTTP_PROXY.
    """

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token

    def call(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        connection = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        except OSError as exc:
            raise DemoError(f"{method} {path}: {exc}") from None
        finally:
            connection.close()
        if response.status >= 400:
            raise DemoError(f"{method} {path} answered {response.status}: {raw.decode(errors='replace')}")
        return json.loads(raw)

    def answers(self) -> bool:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=2)
        try:
            connection.request("GET", "/healthz")
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()


def run_demo(directory: str, *, port: int, items: int, wait: bool, out: TextIO | None = None) -> int:
    """The ``asynctask demo`` command; its exit status (130 when interrupted before the summary)."""
    if not 1 <= items <= MAX_ITEMS:
        raise ValueError(f"--items must be from 1 to {MAX_ITEMS}")
    if not 1 <= port <= 65535:
        raise ValueError("--port must be from 1 to 65535")
    demo = Demo(Path(directory), port, items, out or sys.stdout)
    with _stop_signals(demo.stop.set):
        try:
            return demo.run(wait)
        except DemoError as exc:
            print(f"asynctask demo: {exc}", file=sys.stderr, flush=True)
            return 1
        finally:
            demo.stop_children()


class Demo:
    def __init__(self, directory: Path, port: int, items: int, out: TextIO) -> None:
        self.directory = directory
        self.port = port
        self.items = items
        self.stop = threading.Event()
        # Nobody reading any more (``| head``, a closed terminal) stops the demo, as Ctrl-C does.
        self.out = Output(out, self.stop.set)
        self.children: list[Child] = []

    def say(self, text: str = "") -> None:
        self.out.write(f"{text}\n")
        self.out.flush()

    def run(self, wait: bool) -> int:
        database = self.directory.resolve() / "demo.db"
        url = f"sqlite:///{database}"
        self.say(f"AsyncTask demo: no server needed, everything lives in {_shown(self.directory)}/")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            migrate.upgrade(url)
            revision = migrate.current(url)
            token = _create_token(url)
        except (OSError, SQLAlchemyError) as exc:
            raise DemoError(f"cannot set up the database {_shown(database)}: {exc}") from None
        self.say(f"  database  {_shown(database)} (migrated to revision {revision})")
        port = _free_port(self.port)
        if port != self.port:
            self.say(f"  port {self.port} is busy; the API uses port {port} instead")
        api = Api(port, token)
        page = f"http://{HOST}:{port}/"
        if self.stop.is_set():
            return 130
        self._start(url, port)
        for child in self.children:
            self.say(f"  {child.name:<9} pid {child.process.pid}, log {_shown(child.log)}")
        if not self._wait_for_api(api):
            return 130
        shown_until = "the API token is printed below" if wait else "until the demo stops"
        self.say(f"  page      {page} (the example page; {shown_until})")

        rows = jobs.sample_rows(self.items)
        created = api.call(
            "POST",
            "/api/tasks",
            {
                "job": jobs.demo_import_products.name,
                "items": rows,
                "chunk_size": jobs.CHUNK_SIZE,
                "meta": {"source": "asynctask demo"},
            },
        )
        task_id = created["task_id"]
        self.say(
            f"Submitted {created['items']:,} product rows with POST /api/tasks: "
            f"task {task_id}, {created['jobs']} jobs of {created['chunk_size']} rows"
        )
        started = time.monotonic()
        task = self._follow(api, task_id)
        if task is None:
            return 130
        self._summary(api, task, time.monotonic() - started)
        self.say()
        logs = f"Logs: {', '.join(_shown(child.log) for child in self.children)}"
        if not wait:
            # The servers stop now: an address or a command to try them would lead nowhere.
            self.say(logs)
            self.say("Without --no-wait, the worker and the API keep running for you to try them.")
            return 0
        self.say(f"Example page: {page}  (paste the API token into its token field)")
        self.say(f'API token (tenant "{TENANT}"): {token}')
        self.say(f"Try the API: curl -H 'Authorization: Bearer {token}' {page}api/tasks/{task_id}")
        self.say(logs)
        self.say("The worker and the API keep running; press Ctrl-C to stop them.")
        while not self.stop.wait(0.5):
            self._check()
        return 0

    def _start(self, url: str, port: int) -> None:
        env = child_environment(os.environ)
        command = [sys.executable, "-m", "asynctask"]
        module = jobs.__name__
        worker = [*command, "worker", "--broker", url, "-r", module, "-t", str(WORKER_TIMEOUT)]
        api = [*command, "api", "--broker", url, "--database-url", url, "-r", module]
        api += ["--host", HOST, "--port", str(port), "--workers", "1", "--threads", "16"]
        for name, argv in (("worker", worker), ("API", api)):
            log = self.directory / f"{name.lower()}.log"
            with log.open("wb") as output:
                process = subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.children.append(Child(name, process, log))

    def _wait_for_api(self, api: Api) -> bool:
        """Whether the API answers; False if the demo was stopped first."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not api.answers():
            self._check()
            if time.monotonic() > deadline:
                log = next(_shown(child.log) for child in self.children if child.name == "API")
                raise DemoError(f"the API did not answer within {STARTUP_TIMEOUT:.0f} s; see {log}")
            if self.stop.wait(0.1):
                return False
        return True

    def _follow(self, api: Api, task_id: str) -> dict[str, Any] | None:
        """Show the task's progress until it is done; None if the demo was stopped first."""
        line = ProgressLine(self.out)
        try:
            while True:
                task: dict[str, Any] = api.call("GET", f"/api/tasks/{task_id}?errors=0")
                if task["status"] in DONE_STATUSES:
                    line.finish(task)
                    return task
                line.show(task)
                self._check()
                if self.stop.wait(POLL_INTERVAL):
                    return None
        finally:
            line.end()

    def _summary(self, api: Api, task: dict[str, Any], seconds: float) -> None:
        task_id = task["id"]
        task = api.call("GET", f"/api/tasks/{task_id}?errors={SHOWN_ERRORS}")
        counts = task["counts"]
        retried = sum(1 for event in _events(api, task_id, "finish") if event["attempt"] > 1)
        status = task["status"].replace("_", " ")
        self.say(f"Task {status} in {format_duration(seconds)} ({task['total']} jobs):")
        self.say(f"  finished  {counts.get('finish', 0):>6}  ({retried} of them after a retry)")
        self.say(
            f"  failed    {counts.get('failed', 0):>6}  "
            "a business rule said no (asynctask.JobFailed): not retried"
        )
        self.say(f"  error     {counts.get('error', 0):>6}  crashed: not retried, in the dead set")
        for name in ("cancelled", "enqueue", "working"):
            if counts.get(name):
                self.say(f"  {name:<9} {counts[name]:>6}")
        if task["errors"]:
            self.say(f"First errors (GET /api/tasks/{task_id}?errors={SHOWN_ERRORS}):")
            for event in task["errors"]:
                self.say(f"  {event['status']:<6} {event['error']}")

    def _check(self) -> None:
        """Stop if nobody reads the output any more; raise if a child stopped on its own."""
        self.out.check()
        for child in self.children:
            code = child.process.poll()
            if code is not None:
                raise DemoError(
                    f"the {child.name} stopped (exit status {code}); the end of {_shown(child.log)}:\n"
                    + _tail(child.log, TAIL_LINES)
                )

    def stop_children(self) -> None:
        """TERM every child, wait for each and its process group, then kill what is left."""
        running = [child for child in self.children if child.process.poll() is None]
        if running:
            self.say(f"Stopping the {' and the '.join(child.name for child in running)}...")
        for child in running:
            child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for child in self.children:
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"The {child.name} did not stop within {STOP_GRACE:.0f} s; killing it")
            # The worker's and the API's own processes (a flusher, gunicorn's workers) are in
            # their group, and may outlive it by a moment.
            while _group_alive(child.process.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _group_alive(child.process.pid):
                # The group may empty between the look and the kill: then nothing is left to do.
                with suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()
            code = child.process.returncode
            if code not in (0, -signal.SIGTERM) and child in running:
                self.say(f"The {child.name} exited with status {code}; see {_shown(child.log)}")
        if running:
            self.say("Stopped.")
        self.children = []


def child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without anything that could send the children elsewhere."""
    env = {k: v for k, v in environ.items() if not k.startswith("ASYNCTASK_") and k != "REDIS_URL"}
    # Retries are due after a second or so: poll for them every second, not every five.
    env["ASYNCTASK_SCHEDULED_POLL_INTERVAL"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _events(api: Api, task_id: str, status: str) -> Iterator[dict[str, Any]]:
    after: str | None = None
    while True:
        query = f"status={status}&limit=1000" + (f"&after={quote(after)}" if after else "")
        page = api.call("GET", f"/api/tasks/{task_id}/events?{query}")
        yield from page["items"]
        after = page["next"]
        if not after:
            return


def _create_token(url: str) -> str:
    engine = create_database_engine(url)
    try:
        return tokens.create_token(engine, TENANT, "asynctask demo").token
    finally:
        engine.dispose()


def _free_port(wanted: int) -> int:
    """``wanted`` if nothing listens on it, else a port the system says is free."""
    if _bindable(wanted):
        return wanted
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        # As gunicorn binds: a port left in TIME_WAIT by a previous run counts as free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
        return True


def _tail(path: Path, count: int) -> str:
    lines = path.read_text(errors="replace").splitlines()[-count:]
    return "\n".join(f"  | {line}" for line in lines)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it, else absolute."""
    absolute = path.resolve()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


@contextmanager
def _stop_signals(handler: Callable[[], None]) -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGHUP call ``handler`` instead of ending the process."""

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        handler()

    previous = {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
