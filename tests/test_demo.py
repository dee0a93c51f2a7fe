"""``asynctask demo`` as a person runs it, on a machine where no Redis or PostgreSQL answers: every
server URL in its environment points at a closed port, and the demo must not care."""

from __future__ import annotations

import fcntl
import http.client
import io
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import psutil
import pytest

from asynctask.demo import jobs
from asynctask.demo.cli import child_environment
from asynctask.demo.progress import ProgressLine, progress_text
from tests.conftest import wait_until
from tests.processes import LineReader, free_port

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone

#: Where a demo that read its environment would go, and find nothing listening.
NOWHERE = {
    "REDIS_URL": "redis://127.0.0.1:1/0",
    "ASYNCTASK_REDIS_URL": "redis://127.0.0.1:1/0",
    "ASYNCTASK_BROKER_URL": "redis://127.0.0.1:1/0",
    "ASYNCTASK_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/nowhere",
}
#: Seconds the sample task may take on a busy 2-core machine (retries wait up to 10 s).
RUN_TIMEOUT = 180


class Demo:
    """A running ``asynctask demo`` and everything it printed so far."""

    def __init__(self, cwd: Path, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTASK_")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "asynctask", "demo", *args],
            cwd=cwd,
            env={**env, **NOWHERE},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.process.stdout is not None
        self.reader = LineReader(self.process.stdout)
        self.lines = self.reader.lines

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str) -> re.Match[str]:
        def seen() -> re.Match[str] | None:
            found = re.search(pattern, self.output, re.MULTILINE)
            if found is None and self.process.poll() is not None:
                self.reader.join(5)
                found = re.search(pattern, self.output, re.MULTILINE)
                assert found, (
                    f"the demo exited ({self.process.returncode}) without {pattern!r}:\n{self.output}"
                )
            return found

        try:
            return wait_until(seen, RUN_TIMEOUT, interval=0.1)  # type: ignore[no-any-return]
        except AssertionError:
            raise AssertionError(f"no {pattern!r} in the demo's output:\n{self.output}") from None

    def exit_code(self, timeout: float) -> int:
        code = self.process.wait(timeout)
        self.reader.join(5)
        return code

    def close(self) -> None:
        """Kill what a failed test left running, and close the pipe."""
        if self.process.poll() is None:
            for child in psutil.Process(self.process.pid).children(recursive=True):
                child.kill()
            self.process.kill()
            self.process.wait()
        self.reader.join(5)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def demos() -> Iterator[list[Demo]]:
    started: list[Demo] = []
    yield started
    for demo in started:
        demo.close()


def summary(demo: Demo) -> dict[str, int]:
    finished = demo.wait_for(r"^  finished +(\d+)  \((\d+) of them after a retry\)$")
    failed = demo.wait_for(r"^  failed +(\d+)  ")
    error = demo.wait_for(r"^  error +(\d+)  ")
    return {
        "finish": int(finished[1]),
        "retried": int(finished[2]),
        "failed": int(failed[1]),
        "error": int(error[1]),
    }


def get(port: int, path: str, token: str | None = None) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, response.getheader("Content-Type", ""), body


def gone(process: psutil.Process) -> bool:
    # An orphan whose new parent does not reap it (PID 1 of a container) stays a zombie: it
    # runs nothing any more.
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_demo_runs_without_servers_and_stops_on_ctrl_c(tmp_path: Path, demos: list[Demo]) -> None:
    port = free_port()
    demo = Demo(tmp_path, "--dir", str(tmp_path / "here"), "--port", str(port), "--items", "600")
    demos.append(demo)
    # 600 rows in chunks of 10 are 60 jobs. Rows 42, 142, ... 542 have a negative price: 6
    # failed jobs. Rows 155 and 455 have a category without a tax rate: 2 crashed jobs. Rows
    # 77, 177, ... 577 time out on the first try: 6 jobs that finish after one retry.
    assert summary(demo) == {"finish": 52, "retried": 6, "failed": 6, "error": 2}
    assert re.search(r"^  failed SKU DEMO-000042: price must be positive, got -43\.99$", demo.output, re.M)
    crash = r"^  error  LookupError: SKU DEMO-000155: no tax rate for category 'kitchen'$"
    assert re.search(crash, demo.output, re.M)
    page = demo.wait_for(r"^Example page: (http://127\.0\.0\.1:(\d+)/) ")
    assert int(page[2]) == port
    token = demo.wait_for(r'^API token \(tenant "demo"\): (atk_\S+)$')[1]
    task_id = demo.wait_for(r"task ([A-Za-z0-9_-]+), 60 jobs of 10 rows")[1]
    demo.wait_for(r"press Ctrl-C to stop them\.$")
    assert (tmp_path / "here" / "demo.db").is_file()
    assert "progress: " in demo.output, "not a terminal: plain progress lines"
    assert "\r" not in demo.output

    status, content_type, body = get(port, "/")
    assert status == 200 and content_type.startswith("text/html") and b"<html" in body.lower()
    status, _, body = get(port, f"/api/tasks/{task_id}", token)
    assert status == 200
    task: dict[str, Any] = json.loads(body)
    assert task["status"] == "finished_with_errors"
    assert (task["total"], task["done"]) == (60, 60)
    assert {k: v for k, v in task["counts"].items() if v} == {"finish": 52, "failed": 6, "error": 2}
    status, _, body = get(port, f"/api/tasks/{task_id}/events?status=finish&limit=100", token)
    retried = [event for event in json.loads(body)["items"] if event["attempt"] > 1]
    assert len(retried) == 6
    assert all(any(row["supplier"] == "slowco" for row in event["params"][0]) for event in retried)

    children = psutil.Process(demo.process.pid).children(recursive=True)
    # The worker, the API's gunicorn master and its worker at least.
    assert len(children) >= 3, children
    remote_ports = {c.raddr.port for p in children for c in p.net_connections("inet") if c.raddr}
    assert not remote_ports & {6379, 5432, 1}, "the demo talks to a server"
    demo.process.send_signal(signal.SIGINT)
    assert demo.exit_code(30) == 0, demo.output
    wait_until(lambda: all(gone(child) for child in children), 10, interval=0.1)
    assert "Traceback" not in demo.output
    assert demo.lines[-1] == "Stopped."
    logs = (tmp_path / "here" / "worker.log").read_text() + (tmp_path / "here" / "api.log").read_text()
    assert "Traceback" not in logs
    assert "127.0.0.1:1" not in logs


def test_no_wait_exits_after_the_summary_and_moves_off_a_busy_port(tmp_path: Path, demos: list[Demo]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        demo = Demo(tmp_path, "--port", str(taken), "--items", "50", "--no-wait")
        demos.append(demo)
        moved = int(demo.wait_for(rf"^  port {taken} is busy; the API uses port (\d+) instead$")[1])
        # Rows 0 to 49 in 5 jobs: only row 42 is planted, a negative price.
        assert summary(demo) == {"finish": 4, "retried": 0, "failed": 1, "error": 0}
        assert demo.exit_code(60) == 0, demo.output
    assert re.search(
        rf"^  page      http://127\.0\.0\.1:{moved}/ \(the example page; until the demo stops\)$",
        demo.output,
        re.M,
    )
    # The servers are stopped: nothing that points at them.
    after = demo.output.partition("Task finished with errors")[2]
    assert "http://" not in after and "curl" not in after and "token" not in after.lower()
    assert "Ctrl-C" not in demo.output and "Traceback" not in demo.output
    # The default folder, in the working directory.
    assert (tmp_path / "asynctask-demo" / "demo.db").is_file()


def test_children_get_no_server_url_from_the_environment() -> None:
    env = child_environment({**NOWHERE, "ASYNCTASK_QUEUES": "other", "PATH": "/bin", "HOME": "/home/x"})
    assert env == {
        "PATH": "/bin",
        "HOME": "/home/x",
        "ASYNCTASK_SCHEDULED_POLL_INTERVAL": "1",
        "PYTHONUNBUFFERED": "1",
    }


def test_sample_rows_fit_the_schema_and_plant_troubles_where_documented() -> None:
    rows = jobs.sample_rows(600)
    validator = jobs.demo_import_products.item_validator
    assert validator is not None and all(validator.is_valid(row) for row in rows)
    assert [i for i, row in enumerate(rows) if row["price"].startswith("-")] == list(range(42, 600, 100))
    assert [i for i, row in enumerate(rows) if row["supplier"] == "slowco"] == list(range(77, 600, 100))
    assert [i for i, row in enumerate(rows) if row["category"] == "kitchen"] == [155, 455]


def task(status: str, done: int, counts: dict[str, int], eta: float | None = None) -> dict[str, Any]:
    return {
        "status": status,
        "total": 300,
        "done": done,
        "progress": done / 300,
        "counts": counts,
        "eta_seconds": eta,
    }


def test_progress_on_a_terminal_redraws_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "150")
    out = io.StringIO()
    line = ProgressLine(out, tty=True)
    line.show(task("running", 150, {"finish": 140, "failed": 10, "working": 7}, eta=4.2))
    line.finish(task("finished", 300, {"finish": 290, "failed": 10}))
    first, second = out.getvalue().split("\r")[1:]
    assert " 50%  150/300 jobs  finish 140  failed 10  error 0  working 7" in first and "ETA 4s" in first
    assert first.endswith("\x1b[K")
    assert "100%  300/300 jobs  finish 290" in second and second.endswith("\x1b[K\n")
    assert first.startswith("[" + "#" * 15 + "-" * 15 + "]")


def test_progress_on_a_narrow_terminal_fits_its_width(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    line = ProgressLine(out, tty=True)
    # 100 columns: a shorter bar, then every number. 60: no bar, the numbers cut at 59 characters.
    for columns, start in ((100, "[#"), (60, " 50%  150/300 jobs")):
        monkeypatch.setenv("COLUMNS", str(columns))
        line.show(task("running", 150, {"finish": 140, "failed": 10, "working": 7}))
        drawn = out.getvalue().split("\r")[-1].removesuffix("\x1b[K")
        assert drawn.startswith(start) and len(drawn) <= columns - 1
    assert len(drawn) == 59


def test_progress_elsewhere_prints_plain_lines_only_when_something_changed() -> None:
    out = io.StringIO()
    line = ProgressLine(out, tty=False)
    line.show(task("pending", 0, {"enqueue": 300}))
    line.show(task("pending", 0, {"enqueue": 300}))
    line.finish(task("finished", 300, {"finish": 300}))
    printed = out.getvalue().splitlines()
    assert len(printed) == 2 and all(p.startswith("progress: ") for p in printed)
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert printed[1].startswith("progress: 100%  300/300 jobs  finish 300")


def test_progress_shows_jobs_waiting_for_a_retry_without_an_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "150")
    waiting = progress_text(task("running", 294, {"finish": 284, "failed": 10, "enqueue": 6}, eta=0.2), 50.0)
    assert waiting.endswith("finish 284  failed 10  error 0  waiting 6  50.0 jobs/s")
    assert "ETA" not in waiting and "working" not in waiting
    both = progress_text(task("running", 290, {"finish": 290, "working": 4, "enqueue": 6}, eta=0.2), None)
    assert both.endswith("error 0  working 4  waiting 6  ETA <1s")


def demo_command(tmp_path: Path) -> list[str]:
    # Enough rows that the task is still running when the demo is made to stop.
    argv = ["demo", "--dir", str(tmp_path / "demo"), "--port", str(free_port()), "--items", "3000"]
    return [sys.executable, "-m", "asynctask", *argv]


def demo_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTASK_")}
    return {**env, **NOWHERE}


def family(pid: int) -> list[psutil.Process]:
    """The demo, its worker and API, and every process they started."""
    demo = psutil.Process(pid)
    processes = [demo, *demo.children(recursive=True)]
    # The worker and its watchdog, gunicorn's master and its worker at least.
    assert len(processes) >= 5, processes
    return processes


def kill(processes: list[psutil.Process]) -> None:
    """What a failed test left running."""
    for process in processes:
        with suppress(psutil.NoSuchProcess):
            process.kill()


def test_a_closed_pipe_stops_the_demo_and_all_it_started(tmp_path: Path) -> None:
    """``asynctask demo | head -5``: head exits after 5 lines."""
    process = subprocess.Popen(
        demo_command(tmp_path),
        cwd=tmp_path,
        env=demo_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = process.stdout, process.stderr
    assert stdout is not None and stderr is not None
    processes = [psutil.Process(process.pid)]
    try:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(next(stdout) for _ in range(5)))
        reader.start()
        reader.join(RUN_TIMEOUT)
        assert len(lines) == 5 and lines[-1].startswith("  page      http://"), lines
        processes = family(process.pid)
        stdout.close()
        wait_until(lambda: all(gone(p) for p in processes), 30, interval=0.2)
        # Quietly: no "Exception ignored ... BrokenPipeError" at exit.
        assert stderr.read() == ""
    finally:
        kill(processes)
        process.wait()
        stderr.close()


def test_a_closed_terminal_stops_the_demo_and_all_it_started(tmp_path: Path) -> None:
    """The terminal window closes: the kernel hangs up the demo's terminal (SIGHUP)."""
    terminal, demo_side = os.openpty()

    def take_the_terminal() -> None:
        # The demo leads a session of its own (start_new_session): this makes the pty its
        # controlling terminal, as a shell's terminal is.
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(
        demo_command(tmp_path),
        cwd=tmp_path,
        env=demo_environment(),
        stdin=demo_side,
        stdout=demo_side,
        stderr=demo_side,
        start_new_session=True,
        preexec_fn=take_the_terminal,
    )
    os.close(demo_side)
    processes = [psutil.Process(process.pid)]
    try:
        shown = b""
        deadline = time.monotonic() + RUN_TIMEOUT
        while b"Submitted " not in shown:
            assert time.monotonic() < deadline and process.poll() is None, shown.decode(errors="replace")
            if select.select([terminal], [], [], 0.1)[0]:
                shown += os.read(terminal, 65536)
        processes = family(process.pid)
    finally:
        os.close(terminal)
    try:
        wait_until(lambda: all(gone(p) for p in processes), 30, interval=0.2)
        assert process.wait(5) == 130
    finally:
        kill(processes)
        process.wait()
