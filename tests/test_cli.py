"""The ``asynctask`` command line: what it does, and how it fails (one line, never a traceback)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest
import redis
from sqlalchemy.engine import make_url

from asynctask import Settings
from asynctask.cli import main
from asynctask.db import migrate
from asynctask.keys import Keys
from asynctask.modules import load_module
from tests.cli_support import run_cli, without_asynctask_environment
from tests.conftest import POSTGRES_URL, REDIS_URL, fresh_postgres_schema, wait_until
from tests.processes import LineReader, free_port

ROOT = Path(__file__).resolve().parent.parent
#: Servers with nothing listening.
NO_REDIS = "redis://127.0.0.1:1/0"
NO_POSTGRES = "postgresql://postgres@127.0.0.1:1/test"
#: A database the shared PostgreSQL server does not have.
NO_SUCH_DATABASE = str(make_url(POSTGRES_URL).set(database="asynctask_no_such_database"))
NO_SUCH_MESSAGE = 'FATAL: database "asynctask_no_such_database" does not exist'
#: The jobs the API may submit, for ``asynctask api``.
API_JOBS = "tests.jobs.api_jobs"
UPGRADE = "asynctask db upgrade"
REDIS_SCHEMES = "it must start with redis://, rediss://, unix:// or redis+sentinel://"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def one_line(self) -> str:
        """The failure's only line on stderr, once checked that it is a failure without a traceback."""
        assert self.code != 0, self
        assert "Traceback" not in self.err, self.err
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        return lines[0]


Run = Callable[..., Result]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]


@pytest.fixture
def run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], busy_port: int
) -> Run:
    """``main(argv)`` in ``tmp_path`` with no ASYNCTASK_* or REDIS_URL variable; what it wrote
    to the file descriptors (a worker's child process writes there too).

    An ``api`` command with no ``--port`` gets a busy one: one that failed to fail would
    then stop there instead of serving in the test's process."""
    without_asynctask_environment(monkeypatch)
    monkeypatch.chdir(tmp_path)
    # -r puts directories on sys.path, and loads modules.
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    capfd.readouterr()

    def run_main(*argv: str) -> Result:
        if argv[:1] == ("api",) and "--port" not in argv:
            argv = (*argv, "--port", str(busy_port))
        return Result(*run_cli(list(argv), capfd))

    return run_main


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["enqueue", "hello", "--redis", NO_REDIS],
            "cannot reach Redis: Error 111 connecting to 127.0.0.1:1.",
        ),
        (["enqueue", "hello", "--broker", NO_POSTGRES], "cannot reach the database at " + NO_POSTGRES),
        (["enqueue", "hello", "--broker", NO_SUCH_DATABASE], NO_SUCH_MESSAGE),
        (["worker", "--database-url", NO_SUCH_DATABASE], NO_SUCH_MESSAGE),
        (["api", "--database-url", NO_SUCH_DATABASE], NO_SUCH_MESSAGE),
        (["tokens", "list", "--database-url", NO_SUCH_DATABASE], NO_SUCH_MESSAGE),
        (["db", "current", "--database-url", NO_SUCH_DATABASE], NO_SUCH_MESSAGE),
        (["db", "upgrade", "--database-url", NO_POSTGRES], "Connection refused"),
    ],
)
def test_a_server_or_database_that_is_not_there_is_one_line(run: Run, argv: list[str], message: str) -> None:
    line = run(*argv).one_line()
    assert line.startswith("asynctask: ") and message in line


@pytest.mark.parametrize(
    "argv",
    [
        ["enqueue", "hello"],
        ["worker"],
        ["api"],
        ["tokens", "list"],
        ["tokens", "create", "--tenant", "acme"],
        ["status"],
        ["status", "--json"],
        ["queue", "clear", "default"],
        ["queue", "pause", "default"],
        ["retry", "list"],
        ["dead", "list"],
        ["dead", "delete", "--all"],
        ["periodic", "list"],
        ["jobs", "stopped"],
        ["jobs", "resume", "somejid"],
        ["tasks", "pause", "sometask"],
        ["db", "current"],
        ["db", "downgrade", "base"],
        ["db", "upgrade", "nosuchrevision"],
    ],
)
def test_a_missing_database_file_is_one_line_and_is_not_created(
    run: Run, tmp_path: Path, argv: list[str]
) -> None:
    line = run(*argv).one_line()
    if argv[:2] == ["db", "upgrade"]:
        assert line.endswith("Can't locate revision identified by 'nosuchrevision'")
    else:
        path = tmp_path / "asynctask.db"
        assert (
            line == f"asynctask: database file {path} does not exist: run `asynctask db upgrade` to create it"
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["enqueue", "hello"], ["worker"], ["api"], ["tokens", "list"]])
def test_a_database_never_migrated_is_one_line(run: Run, database_url: str, command: list[str]) -> None:
    if make_url(database_url).get_backend_name() == "sqlite":
        sqlite3.connect(make_url(database_url).database).close()
    line = run(*command, "--database-url", database_url).one_line()
    assert "run `asynctask db upgrade" in line
    assert migrate.current(database_url) is None


@pytest.mark.parametrize(
    ("files", "require", "message"),
    [
        ({}, "missing/jobs.py", "asynctask: -r missing/jobs.py: no such file ("),
        ({}, "no_such_module_here", "asynctask: -r no_such_module_here: no module 'no_such_module_here' in "),
        ({"syn.py": "def broken(:\n"}, "syn.py", "asynctask: -r syn.py: syntax error at syn.py line 1: "),
        (
            {"pkg/jobs.py": "import not_a_sibling\n"},
            "pkg/jobs.py",
            "asynctask: -r pkg/jobs.py: importing it failed: ModuleNotFoundError: "
            "No module named 'not_a_sibling' (pkg/jobs.py line 1)",
        ),
        (
            {"boom.py": "x = 1\nraise RuntimeError('no config')\n"},
            "boom.py",
            "asynctask: -r boom.py: importing it failed: RuntimeError: no config (boom.py line 2)",
        ),
    ],
)
@pytest.mark.parametrize("command", ["worker", "api"])
def test_a_bad_module_is_one_line(
    run: Run, tmp_path: Path, command: str, files: dict[str, str], require: str, message: str
) -> None:
    for name, text in files.items():
        write(tmp_path / name, text)
    line = run(command, "-r", require).one_line()
    assert line.startswith(message), line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["worker", "-c", "x"], "asynctask worker: argument -c/--concurrency: invalid int value: 'x'"),
        (["worker", "-c", "0"], "asynctask: concurrency must be at least 1"),
        (["worker", "-q", "a,b"], "asynctask: queue weight must be an integer in 'a,b'"),
        (["enqueue"], "asynctask enqueue: the following arguments are required: name"),
        (["enqueue", "X", "{not json"], "asynctask: ARGS must be a JSON array"),
        (["enqueue", "X", '{"a": 1}'], 'asynctask: ARGS must be a JSON array, not {"a": 1}'),
        (["enqueue", "X", "--retry", "maybe"], "asynctask: --retry must be true, false or a number"),
        (["db", "downgrade"], "asynctask db downgrade: the following arguments are required: revision"),
        (["tokens", "create"], "asynctask: tokens create needs --tenant NAME, or --operator for the "),
        (["nosuchcommand"], "asynctask: argument COMMAND: invalid choice: 'nosuchcommand'"),
        (["api", "--port", "99999"], "asynctask api: argument --port: '99999' is not a port (1 to 65535)"),
        (["db", "current", "--database-url", "not a url"], "asynctask: --database-url is not a database URL"),
        (["status", "--redis", "rediss//host"], f"asynctask: --redis is not a Redis URL: {REDIS_SCHEMES}"),
        (["enqueue", "X", "--broker", "http://host"], "asynctask: --broker is not a broker URL: it must "),
        (
            ["tokens", "list", "--database-url", "redis://host"],
            "asynctask: --database-url is not a database URL",
        ),
    ],
)
def test_a_bad_argument_is_one_line(run: Run, argv: list[str], message: str) -> None:
    assert run(*argv).one_line().startswith(message)


PSYCOPG2_MISSING = pytest.mark.skipif(find_spec("psycopg2") is not None, reason="psycopg2 is installed")


@pytest.mark.parametrize(
    ("variable", "url", "message"),
    [
        (
            "ASYNCTASK_REDIS_URL",
            "rediss//host",
            f"ASYNCTASK_REDIS_URL is not a Redis URL: {REDIS_SCHEMES} (it has no scheme://)",
        ),
        (
            "REDIS_URL",
            "http://host",
            f"REDIS_URL is not a Redis URL: {REDIS_SCHEMES} (it starts with http://)",
        ),
        (
            "ASYNCTASK_BROKER_URL",
            "redis:/x",
            "ASYNCTASK_BROKER_URL is not a broker URL: it must start with redis://, rediss://, unix://, "
            "redis+sentinel://, sqlite:// or postgresql:// (it has no scheme://)",
        ),
        pytest.param(
            "ASYNCTASK_DATABASE_URL",
            "postgresql+psycopg2://postgres@127.0.0.1/test",
            "ASYNCTASK_DATABASE_URL uses the psycopg2 driver, which is not installed; use postgresql:// "
            "(psycopg 3, installed) or install psycopg2",
            marks=PSYCOPG2_MISSING,
        ),
    ],
)
@pytest.mark.parametrize("command", [["status"], ["enqueue", "hello"], ["worker"], ["db", "current"]])
def test_a_mistyped_url_in_the_environment_is_one_line_naming_it(
    run: Run, monkeypatch: pytest.MonkeyPatch, variable: str, url: str, message: str, command: list[str]
) -> None:
    monkeypatch.setenv(variable, url)
    result = run(*command)
    assert result.one_line() == f"asynctask: {message}"
    assert result.code == 2


@PSYCOPG2_MISSING
def test_a_psycopg2_url_given_as_an_option_is_one_line_naming_it(run: Run) -> None:
    url = "postgresql+psycopg2://postgres@127.0.0.1/test"
    line = run("db", "upgrade", "--database-url", url).one_line()
    assert line.startswith("asynctask: --database-url uses the psycopg2 driver, which is not installed; ")


def test_verbose_adds_the_traceback(run: Run) -> None:
    result = run("enqueue", "hello", "--redis", NO_REDIS, "-v")
    assert result.code == 2
    assert (
        "Traceback (most recent call last)" in result.err and "redis.exceptions.ConnectionError" in result.err
    )
    assert result.err.splitlines()[-1].startswith("asynctask: cannot reach Redis: ")


def test_a_file_module_imports_its_siblings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    name = f"jobs_{uuid.uuid4().hex[:8]}"
    helper = f"helpers_{uuid.uuid4().hex[:8]}"
    write(tmp_path / "pkg" / f"{helper}.py", "VALUE = 42\n")
    write(tmp_path / "pkg" / f"{name}.py", f"from {helper} import VALUE\n")
    monkeypatch.chdir(tmp_path)
    try:
        load_module(f"pkg/{name}.py")
        assert sys.modules[name].VALUE == 42
    finally:
        sys.modules.pop(name, None)
        sys.modules.pop(helper, None)


def test_help_lists_every_command_in_plain_text(run: Run) -> None:
    for argv in ([], ["-h"]):
        result = run(*argv)
        assert result.code == 0 and result.err == ""
        commands = re.findall(r"^    (\w+) ", result.out, re.MULTILINE)
        assert commands == [
            "worker",
            "enqueue",
            "db",
            "tokens",
            "tasks",
            "jobs",
            "periodic",
            "status",
            "retry",
            "dead",
            "queue",
            "api",
            "demo",
            "flusher",
        ]
        assert "``" not in result.out and ":class:" not in result.out
    for group, commands in (
        ("db", ["upgrade", "downgrade", "current"]),
        ("tokens", ["create", "list", "revoke"]),
        ("tasks", ["update", "pause", "resume"]),
        ("jobs", ["stop", "resume", "stopped"]),
        ("retry", ["list", "retry", "delete"]),
        ("dead", ["list", "retry", "delete"]),
        ("queue", ["clear"]),
    ):
        result = run(group)
        assert (result.code, result.err) == (0, "")
        assert result.out.startswith(f"usage: asynctask {group} ")
        assert all(re.search(rf"^    {command}\b", result.out, re.MULTILINE) for command in commands)


def test_version() -> None:
    from asynctask import __version__

    done = subprocess.run([sys.executable, "-m", "asynctask", "--version"], capture_output=True, text=True)
    result = Result(done.returncode, done.stdout, done.stderr)
    assert (result.code, result.out, result.err) == (0, f"asynctask {__version__}\n", "")


def test_db_upgrade_takes_a_revision(run: Run, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tracking.db'}"
    result = run("db", "upgrade", "0001", "--database-url", url)
    assert (result.code, result.err) == (0, "")
    assert result.out.strip().endswith(f"to revision 0001 (head is {migrate.head()})")
    result = run("db", "upgrade", "head", "--database-url", url)
    assert result.out.strip().endswith(f"to revision {migrate.head()} (head)")


def test_enqueue_pushes_a_job_from_the_shell(
    redis_settings: Settings, conn: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "enqueue",
        "SleepWorker",
        '[3600, "ü"]',
        "--redis",
        redis_settings.redis_url,
        "--namespace",
        redis_settings.namespace,
    ]
    assert main([*argv, "--queue", "low", "--retry", "3"]) == 0
    jid = capsys.readouterr().out.strip()
    [raw] = conn.lrange(Keys(redis_settings.namespace).queue("low"), 0, -1)
    job = json.loads(raw)
    assert (job["jid"], job["class"], job["args"], job["retry"]) == (jid, "SleepWorker", [3600, "ü"], 3)
    assert main([*argv, "--in", "60"]) == 0
    assert conn.zcard(Keys(redis_settings.namespace).schedule) == 1
    capsys.readouterr()
    # -q, as the worker's option to name a queue.
    assert main([*argv, "-q", "high"]) == 0
    jid = capsys.readouterr().out.strip()
    [raw] = conn.lrange(Keys(redis_settings.namespace).queue("high"), 0, -1)
    assert json.loads(raw)["jid"] == jid


class Process:
    """A command running in the background, and the lines of its stderr so far."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "asynctask", *argv],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.process.stderr is not None
        self.reader = LineReader(self.process.stderr)
        self.lines = self.reader.lines

    def line(self, pattern: str) -> str:
        def found() -> str | None:
            assert self.process.poll() is None, "\n".join(self.lines)
            return next((line for line in self.lines if re.search(pattern, line)), None)

        try:
            return wait_until(found, 60, interval=0.05)  # type: ignore[no-any-return]
        except AssertionError:
            raise AssertionError(f"no {pattern!r} in:\n" + "\n".join(self.lines)) from None

    def stop(self) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        code = self.process.wait(60)
        self.reader.join(5)
        assert self.process.stderr is not None
        self.process.stderr.close()
        return code


@pytest.fixture
def background(tmp_path: Path) -> Iterator[Callable[..., Process]]:
    started: list[Process] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTASK_") and k != "REDIS_URL"}
    env["PYTHONPATH"] = str(ROOT)

    def start(*argv: str) -> Process:
        process = Process(list(argv), env, tmp_path)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def fields(line: str) -> dict[str, str]:
    """A logfmt line's fields (quoted values unquoted)."""
    return {k: json.loads(v) if v.startswith('"') else v for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}


def test_the_worker_says_what_it_serves_at_the_default_level(
    background: Callable[..., Process], database_url: str
) -> None:
    migrate.upgrade(database_url)
    # PostgreSQL trusts the test user: the password is not checked, and must not be shown.
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        database_url = url.set(password="s3cret").render_as_string(hide_password=False)
    worker = background("worker", "--database-url", database_url, "-q", "critical,2", "-q", "low")
    started = fields(worker.line("worker started"))
    assert started["level"] == "info"
    assert started["queues"] == "critical,2 low" and started["concurrency"] == "10"
    shown = database_url.replace(":s3cret@", ":***@")
    assert started["broker"] == started["database"] == shown
    assert "s3cret" not in "\n".join(worker.lines)
    assert worker.stop() == 0


def test_a_stop_signalled_to_the_whole_process_group_is_logged_once(
    background: Callable[..., Process], tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'jobs.db'}"
    migrate.upgrade(database)
    worker = background("worker", "--database-url", database)
    worker.line("worker started")
    # As a terminal's Ctrl-C or systemd's stop do: every process of the group gets the signal (the
    # worker and its watchdog); and more stops come until the last process is gone, as they may
    # while the interpreter exits.
    while worker.process.poll() is None:
        try:
            os.killpg(worker.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            break
        time.sleep(0.002)
    assert worker.stop() == 0
    stopping = [fields(line)["msg"] for line in worker.lines if "TERM" in line]
    assert stopping == ["TERM: shutting down"], "\n".join(worker.lines)


def test_a_redis_worker_warns_of_a_tracking_database_it_cannot_use_and_runs(
    background: Callable[..., Process], tmp_path: Path, namespace: str
) -> None:
    missing = tmp_path / "tracking.db"
    argv = [
        "worker",
        "--redis",
        REDIS_URL,
        "--namespace",
        namespace,
        "--database-url",
        f"sqlite:///{missing}",
    ]
    worker = background(*argv)
    warned = fields(worker.line("does not exist"))
    assert warned["level"] == "warning"
    assert warned["msg"].endswith("until then, tracked jobs run but their progress is not recorded")
    worker.line("worker started")
    assert worker.stop() == 0
    assert not missing.exists()


@pytest.mark.parametrize("require", [API_JOBS, None])
def test_the_api_says_where_it_listens_and_warns_without_jobs(
    background: Callable[..., Process], tmp_path: Path, require: str | None
) -> None:
    database = f"sqlite:///{tmp_path / 'api.db'}"
    migrate.upgrade(database)
    port = free_port()
    argv = ["api", "--database-url", database, "--port", str(port), "--workers", "1", "--threads", "4"]
    api = background(*argv, *(["-r", require] if require else []))
    listening = fields(api.line("api listening"))
    assert listening["url"] == f"http://127.0.0.1:{port}/"
    assert listening["broker"] == listening["database"] == database
    warned = [line for line in api.lines if "no registered job has api=True" in line]
    if require:
        assert (listening["jobs"], listening["queues"], warned) == (
            "import_products sign_up_products",
            "default",
            [],
        )
    else:
        assert listening["jobs"] == "" and len(warned) == 1
    assert api.stop() == 0


def test_the_api_warns_when_its_pools_may_hold_more_postgresql_connections_than_are_left(
    background: Callable[..., Process],
) -> None:
    """Tracking and the broker in one PostgreSQL database, sharing one pool: 200 threads (204
    connections) cannot fit in the test server's 100."""
    with fresh_postgres_schema() as database:
        migrate.upgrade(database)
        port = free_port()
        argv = ["api", "--database-url", database, "--port", str(port), "--workers", "1"]
        api = background(*argv, "--threads", "200", "-r", API_JOBS)
        api.line("api listening")
        warned = [fields(line) for line in api.lines if "connections to PostgreSQL" in line]
        assert api.stop() == 0
    [warning] = warned
    assert warning["level"] == "warning"
    assert warning["msg"].startswith("the API may hold 204 connections to PostgreSQL at ")
    assert "(1 worker(s) x 200 threads), but the server has " in warning["msg"]


def test_the_api_will_not_start_on_a_port_in_use(run: Run, tmp_path: Path, busy_port: int) -> None:
    database = f"sqlite:///{tmp_path / 'api.db'}"
    migrate.upgrade(database)
    line = run("api", "-r", API_JOBS, "--database-url", database).one_line()
    assert line.startswith(f"asynctask: cannot listen on 127.0.0.1:{busy_port}: Address already in use; ")


def _stderr_after_exit(proc: subprocess.Popen[bytes]) -> bytes:
    """The stderr of a worker told to stop, once it has exited. One still running after a
    minute (a loaded machine takes seconds, not that) is killed and its log shown."""
    try:
        return proc.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        err = proc.communicate()[1]
        raise AssertionError("the worker did not stop within 60 s; its log:\n" + err.decode()) from None


def test_worker_command_runs_jobs_with_weighted_queues_and_logs_them(
    redis_settings: Settings, conn: redis.Redis
) -> None:
    keys = Keys(redis_settings.namespace)
    for queue in ("critical", "default"):
        conn.lpush(
            keys.queue(queue),
            json.dumps({"class": "record_jid", "args": [0], "jid": queue * 2, "retry": True}),
        )
    env = {**os.environ, "ASYNCTASK_REDIS_URL": redis_settings.redis_url, "ASYNCTASK_LOG_FORMAT": "json"}
    command = [sys.executable, "-m", "asynctask", "worker", "-r", "tests/jobs/crash_jobs.py", "--namespace"]
    command += [redis_settings.namespace, "-q", "critical,3", "-q", "default", "-c", "2", "-v"]
    env["ASYNCTASK_NAMESPACE"] = redis_settings.namespace
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_until(lambda: conn.scard(f"{redis_settings.namespace}:test:done") == 2, timeout=15)
        time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        err = _stderr_after_exit(proc)
    assert proc.returncode == 0
    lines = [json.loads(line) for line in err.decode().splitlines()]
    done = [line for line in lines if line["msg"] == "done"]
    assert {line["jid"] for line in done} == {"criticalcritical", "defaultdefault"}
    assert all(line["elapsed"] >= 0 and line["class"] == "record_jid" for line in done)
    started = next(line for line in lines if line["msg"] == "worker started")
    assert started["queues"] == "critical,3 default" and started["concurrency"] == 2
    assert started["broker"] == REDIS_URL
