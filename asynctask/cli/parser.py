"""The command line's grammar: ``asynctask [-v] COMMAND [options]``.

A mistyped argument is one line on stderr (exit status 2); a command group given alone
(``asynctask``, ``asynctask db``) prints its help.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from asynctask import __version__
from asynctask.cli import commands, sets, status
from asynctask.cli import jobs as resumable
from asynctask.cli import periodic as periodic_cli
from asynctask.cli import tasks as feeds
from asynctask.cli.failures import CONFIG, CommandError

N = TypeVar("N", int, float)

DESCRIPTION = (
    "AsyncTask runs background jobs: on Redis (Sidekiq's format) or on SQLite/PostgreSQL, with "
    "tasks tracked in SQL and an HTTP API."
)
EPILOG = (
    "Run 'asynctask COMMAND --help' for the options of a command. Add -v to see the traceback of an error."
)


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(CONFIG, f"{self.prog}: {message} (see {self.prog} --help)\n")


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog: str) -> None:
        # Wide enough a column that "downgrade" and "--database-url URL" keep their help beside them.
        super().__init__(prog, max_help_position=32)


if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[Parser]


def build_parser() -> Parser:
    parser = Parser(prog="asynctask", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("-V", "--version", action="version", version=f"asynctask {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the traceback of an error")
    parser.set_defaults(run=_help(parser))
    group = parser.add_subparsers(title="commands", metavar="COMMAND")
    _worker(group)
    _enqueue(group)
    _db(group)
    _tokens(group)
    _tasks(group)
    _jobs(group)
    _periodic(group)
    _status(group)
    _sets(group)
    _queue(group)
    _api(group)
    _demo(group)
    _flusher(group)
    return parser


def _worker(group: Commands) -> None:
    worker = group.add_parser("worker", help="run jobs from the broker's queues")
    _connection_options(worker)
    _require_option(worker, "module (dotted name or .py file) that registers jobs; repeatable")
    worker.add_argument(
        "-q",
        "--queue",
        action="append",
        default=[],
        metavar="NAME[,WEIGHT][,fifo]",
        help="queue to process, with an optional weight; fifo: in push order, not in turn by tenant;"
        " repeatable (default: default)",
    )
    worker.add_argument("-c", "--concurrency", type=int, help="processor threads (default 10)")
    worker.add_argument(
        "-a",
        "--async-concurrency",
        type=int,
        metavar="N",
        help="async jobs awaited at once on the process's event loop (env ASYNCTASK_ASYNC_CONCURRENCY; "
        "default 100)",
    )
    worker.add_argument(
        "-t",
        "--timeout",
        type=float,
        help="seconds to wait for busy jobs on TERM; the process exits a few seconds later at most "
        "(default 25)",
    )
    worker.add_argument(
        "--max-jobs",
        type=int,
        metavar="N",
        help="replace the worker process after N jobs (env ASYNCTASK_MAX_JOBS; default: never)",
    )
    worker.add_argument(
        "--max-memory",
        type=int,
        metavar="MB",
        help="replace the worker process when a job leaves it above MB of RSS "
        "(env ASYNCTASK_MAX_MEMORY_MB; default: never)",
    )
    worker.add_argument(
        "--no-cpu-pinning",
        dest="cpu_pinning",
        action="store_false",
        default=None,
        help="let job threads run on every CPU even while jobs come in batches "
        "(env ASYNCTASK_CPU_PINNING=false)",
    )
    worker.add_argument("-g", "--tag", help="tag shown in Sidekiq's Web UI")
    _verbose_option(worker, "log every job start and finish; show the traceback of an error")
    worker.add_argument("--log-format", choices=["logfmt", "json"], help="log line format (default logfmt)")
    worker.set_defaults(run=commands.run_worker)


def _enqueue(group: Commands) -> None:
    enqueue = group.add_parser("enqueue", help="push one job")
    _connection_options(enqueue)
    enqueue.add_argument("name", help="job class name, e.g. SleepWorker")
    enqueue.add_argument("args", nargs="?", default="[]", help="JSON array of arguments (default [])")
    enqueue.add_argument("-q", "--queue", default=None, help="queue (default: the job's, or default)")
    enqueue.add_argument("--retry", default=None, help="true, false or a number of retries")
    when = enqueue.add_mutually_exclusive_group()
    when.add_argument("--in", dest="delay", type=float, help="run after this many seconds")
    when.add_argument("--at", type=float, help="run at this epoch time")
    _verbose_option(enqueue)
    enqueue.set_defaults(run=commands.run_enqueue)


def _db(group: Commands) -> None:
    db_commands = _command_group(
        group, "db", help="migrate the tracking database (upgrade, downgrade, current)", dest="db_command"
    )
    upgrade = db_commands.add_parser("upgrade", help="apply the migrations up to a revision")
    upgrade.add_argument(
        "revision", nargs="?", default="head", help="target revision (default: head, the latest)"
    )
    downgrade = db_commands.add_parser("downgrade", help="revert the migrations down to a revision")
    downgrade.add_argument("revision", help="target revision; base removes the tracking tables")
    current = db_commands.add_parser("current", help="show the revision the database is at")
    _database_commands((upgrade, downgrade, current), commands.run_db)


def _tokens(group: Commands) -> None:
    tokens_commands = _command_group(
        group,
        "tokens",
        help="manage the HTTP API's bearer tokens (create, list, revoke)",
        dest="tokens_command",
    )
    create = tokens_commands.add_parser(
        "create", help="create a token for a tenant, or an operator's; prints it once, on stdout"
    )
    create.add_argument(
        "--tenant",
        metavar="NAME",
        help="the tenant the token acts as (needed unless --operator: without it, an operator's "
        "token is the deployment's and sees every tenant's tasks)",
    )
    create.add_argument("--label", metavar="TEXT", help="a note on what the token is for")
    create.add_argument(
        "--operator",
        action="store_true",
        help="it may also call the operator endpoints (the deployment's, not one tenant's)",
    )
    listing = tokens_commands.add_parser("list", help="show tokens (never their secrets)")
    listing.add_argument("--tenant", metavar="NAME", help="only this tenant's tokens")
    revoke = tokens_commands.add_parser("revoke", help="revoke a token for good")
    revoke.add_argument("id", help="the token's id, as tokens list shows it")
    _database_commands((create, listing, revoke), commands.run_tokens)


def _tasks(group: Commands) -> None:
    tasks_commands = _command_group(
        group,
        "tasks",
        help="show a task; tune a fed task while it runs (update, pause, resume)",
        dest="tasks_command",
    )
    show = tasks_commands.add_parser("show", help="a task's progress, first errors and callbacks")
    update = tasks_commands.add_parser(
        "update", help="change a fed task's parallel, interval or priority (the others stay)"
    )
    update.add_argument("--parallel", type=feeds.parallel, metavar="N", help="jobs queued or running at once")
    update.add_argument(
        "--interval", type=feeds.interval, metavar="SECONDS", help="seconds between two releases (0: none)"
    )
    update.add_argument(
        "--priority", type=feeds.priority, metavar="P", help="lower runs first; 0 is every other job's"
    )
    pause = tasks_commands.add_parser(
        "pause", help="release no more of a fed task's jobs (running ones finish)"
    )
    resume = tasks_commands.add_parser("resume", help="release a paused fed task's jobs again")
    for tasks_command in (show, update, pause, resume):
        tasks_command.add_argument("id", help="the task's id")
    _store_commands((show, update, pause, resume), feeds.run_tasks)


def _jobs(group: Commands) -> None:
    jobs_commands = _command_group(
        group, "jobs", help="stop a resumable job, resume it, list the stopped ones", dest="jobs_command"
    )
    stop = jobs_commands.add_parser(
        "stop", help="park a resumable job with its checkpoint (a running one at its next checkpoint)"
    )
    resume = jobs_commands.add_parser("resume", help="send a stopped job back to its queue, to continue")
    for command in (stop, resume):
        command.add_argument("jid", help="the job's jid")
    stopped = jobs_commands.add_parser("stopped", help="list the stopped jobs, latest first")
    stopped.add_argument(
        "--limit", type=_positive_int, default=50, help="show at most this many (default 50)"
    )
    _store_commands((stop, resume, stopped), resumable.run_jobs)


def _periodic(group: Commands) -> None:
    periodic_commands = _command_group(
        group, "periodic", help="see the periodic schedules; pause or resume one", dest="periodic_command"
    )
    listing = periodic_commands.add_parser("list", help="show every schedule with its next and last run")
    pause = periodic_commands.add_parser(
        "pause", help="enqueue nothing at the schedule's ticks until resumed"
    )
    resume = periodic_commands.add_parser(
        "resume", help="enqueue the schedule's ticks again, from the next one"
    )
    for command in (pause, resume):
        command.add_argument("name", help="the schedule's name")
    _store_commands((listing, pause, resume), periodic_cli.run_periodic)


def _status(group: Commands) -> None:
    command = group.add_parser(
        "status", help="show counts, queues, the retry and dead sets and the processes at a glance"
    )
    command.add_argument("--json", action="store_true", help="print one JSON object")
    command.add_argument(
        "--watch", type=_positive_float, metavar="SECONDS", help="print it again every SECONDS until Ctrl-C"
    )
    _store_commands((command,), status.run_status)


def _sets(group: Commands) -> None:
    for name, what in (("retry", "failed jobs waiting for a retry"), ("dead", "jobs out of retries")):
        commands_of = _command_group(
            group, name, help=f"list, retry now or delete the {what}", dest="set_command"
        )
        listing = commands_of.add_parser("list", help="show the entries, latest first")
        listing.add_argument(
            "--limit", type=_positive_int, default=50, help="show at most this many (default 50)"
        )
        retry = commands_of.add_parser("retry", help="enqueue entries now")
        delete = commands_of.add_parser("delete", help="remove entries")
        for command in (retry, delete):
            command.add_argument("jids", nargs="*", metavar="JID", help="the jobs' jids")
            command.add_argument("--all", action="store_true", help="every entry of the set")
        _store_commands((listing, retry, delete), sets.run_set, set_name=name)


def _queue(group: Commands) -> None:
    commands_of = _command_group(group, "queue", help="clear, pause or resume a queue", dest="queue_command")
    clear = commands_of.add_parser("clear", help="delete every job waiting in the queue")
    pause = commands_of.add_parser(
        "pause", help="no worker takes the queue's jobs until it is resumed (pushes still land in it)"
    )
    resume = commands_of.add_parser("resume", help="let workers take the queue's jobs again")
    for command in (clear, pause, resume):
        command.add_argument("name", help="the queue's name")
    _store_commands((clear, pause, resume), sets.run_queue)


def _api(group: Commands) -> None:
    api = group.add_parser("api", help="serve the HTTP API and the example page (gunicorn)")
    _connection_options(api)
    _require_option(
        api, "module that registers the jobs the API may submit; repeatable (env ASYNCTASK_REQUIRE)"
    )
    api.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    api.add_argument("--port", type=_port, default=8000, help="port (default 8000)")
    api.add_argument("--workers", type=int, default=2, help="gunicorn worker processes (default 2)")
    api.add_argument(
        "--threads", type=int, default=32, help="threads per worker; each open stream holds one (default 32)"
    )
    api.add_argument("--access-log", action="store_true", help="log every request to stderr")
    _verbose_option(api, "log at INFO level; show the traceback of an error")
    api.set_defaults(run=_provided("api"))


def _demo(group: Commands) -> None:
    demo = group.add_parser(
        "demo",
        help="run a worker, the API and a sample task on a local SQLite file (no server needed)",
    )
    demo.add_argument(
        "--dir", default="asynctask-demo", help="folder for the database and logs (default ./asynctask-demo)"
    )
    demo.add_argument(
        "--port", type=_port, default=8000, help="the API's port, another if busy (default 8000)"
    )
    demo.add_argument("--items", type=int, default=3000, help="rows in the sample task (default 3000)")
    demo.add_argument("--no-wait", action="store_true", help="stop everything after the summary")
    _verbose_option(demo)
    demo.set_defaults(run=commands.run_demo)


def _flusher(group: Commands) -> None:
    flusher = group.add_parser(
        "flusher", help="apply tracked jobs' transitions to the tracking database (workers start one each)"
    )
    _connection_options(flusher)
    flusher.add_argument("--consumer", help="name in the flushers' consumer group (default: host:pid)")
    flusher.add_argument("--parent", type=int, metavar="PID", help="exit when this process is gone")
    _verbose_option(flusher)
    flusher.set_defaults(run=commands.run_flusher)


def _command_group(group: Commands, name: str, help: str, *, dest: str) -> Commands:
    """A command that groups others (``asynctask NAME COMMAND``); alone, it prints its help.
    ``dest``: the attribute that names the command given."""
    parser = group.add_parser(name, help=help)
    parser.set_defaults(run=_help(parser))
    return parser.add_subparsers(title="commands", metavar="COMMAND", dest=dest)


def _database_commands(
    commands: tuple[argparse.ArgumentParser, ...], run: Callable[[argparse.Namespace], int]
) -> None:
    """Commands that act on the tracking database: its URL option, ``-v``, and what runs them."""
    for command in commands:
        _database_option(command)
        _verbose_option(command)
        command.set_defaults(run=run)


def _store_commands(
    commands: tuple[argparse.ArgumentParser, ...], run: Callable[[argparse.Namespace], int], **defaults: str
) -> None:
    """Commands that act on the broker's store: its connection options, ``-v``, and what runs them."""
    for command in commands:
        _connection_options(command)
        _verbose_option(command)
        command.set_defaults(run=run, **defaults)


def _connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker",
        metavar="URL",
        help="where jobs live: redis://, sqlite:/// or postgresql:// (env ASYNCTASK_BROKER_URL; "
        "default: the Redis URL if set, else the tracking database)",
    )
    parser.add_argument("--redis", metavar="URL", help="Redis URL (env ASYNCTASK_REDIS_URL, then REDIS_URL)")
    parser.add_argument(
        "--namespace", help="key prefix as redis-namespace writes it (env ASYNCTASK_NAMESPACE)"
    )
    _database_option(parser)


def _database_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="SQLAlchemy URL of the tracking database, where the jobs live too with no Redis "
        "(env ASYNCTASK_DATABASE_URL, default sqlite:///asynctask.db)",
    )


def _require_option(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("-r", "--require", action="append", default=[], metavar="MODULE", help=text)


def _verbose_option(parser: argparse.ArgumentParser, text: str = "show the traceback of an error") -> None:
    # SUPPRESS: when not given here, the value of the top-level -v stays.
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=text)


def _help(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def show(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 0

    return show


def _number(convert: Callable[[str], N], accept: Callable[[N], bool], what: str) -> Callable[[str], N]:
    """An argparse type: ``text`` converted, if ``accept`` takes it; otherwise a usage error
    saying that ``text`` is not ``what``."""

    def parse(text: str) -> N:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    return parse


_port = _number(int, lambda port: 1 <= port <= 65535, "a port (1 to 65535)")
_positive_int = _number(int, lambda number: number >= 1, "a whole number of at least 1")
_positive_float = _number(float, lambda seconds: 0 < seconds < float("inf"), "a number of seconds above 0")


def _provided(name: str) -> Callable[[argparse.Namespace], int]:
    """Command ``name`` as another package implements it, found through the
    ``asynctask.commands`` entry point group (``api`` comes with ``webapi``), so that asynctask
    never imports that package itself."""

    def run(args: argparse.Namespace) -> int:
        # Imported here: importlib.metadata would add a tenth of every other command's start-up.
        from importlib.metadata import entry_points

        found = entry_points(group="asynctask.commands", name=name)
        if not found:
            raise CommandError(
                f"no installed package provides the {name!r} command (an asynctask.commands entry "
                "point); reinstall asynctask (pip install -e . in a checkout)"
            )
        command: Callable[[argparse.Namespace], int] = next(iter(found)).load()
        return command(args)

    return run
