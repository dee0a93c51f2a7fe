"""``asynctask`` command line: ``worker`` runs jobs, ``enqueue`` pushes one from a shell, ``db``
migrates the tracking database, ``tokens`` manages the HTTP API's bearer tokens."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from asynctask import log
from asynctask.modules import load_module
from asynctask.settings import QueueSpec, Settings

if TYPE_CHECKING:
    from asynctask.tokens import TokenInfo


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    # The worker command runs itself again in a child process, with the same arguments.
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(args.run(args))
    except (ValueError, TypeError, ImportError) as exc:
        print(f"asynctask: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asynctask", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    worker = commands.add_parser("worker", help="run jobs from the broker's queues")
    _connection_options(worker)
    worker.add_argument(
        "-r",
        "--require",
        action="append",
        default=[],
        metavar="MODULE",
        help="module (dotted name or .py file) that registers jobs; repeatable",
    )
    worker.add_argument(
        "-q",
        "--queue",
        action="append",
        default=[],
        metavar="NAME[,WEIGHT]",
        help="queue to process, with an optional weight; repeatable (default: default)",
    )
    worker.add_argument("-c", "--concurrency", type=int, help="processor threads (default 10)")
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
    worker.add_argument("-g", "--tag", help="tag shown in Sidekiq's Web UI")
    worker.add_argument("-v", "--verbose", action="store_true", help="log every job start and finish")
    worker.add_argument("--log-format", choices=["logfmt", "json"], help="log line format (default logfmt)")
    worker.set_defaults(run=_run_worker)

    enqueue = commands.add_parser("enqueue", help="push one job")
    _connection_options(enqueue)
    enqueue.add_argument("name", help="job class name, e.g. SleepWorker")
    enqueue.add_argument("args", nargs="?", default="[]", help="JSON array of arguments (default [])")
    enqueue.add_argument("--queue", default=None, help="queue (default: the job's, or default)")
    enqueue.add_argument("--retry", default=None, help="true, false or a number of retries")
    when = enqueue.add_mutually_exclusive_group()
    when.add_argument("--in", dest="delay", type=float, help="run after this many seconds")
    when.add_argument("--at", type=float, help="run at this epoch time")
    enqueue.set_defaults(run=_run_enqueue)

    flusher = commands.add_parser(
        "flusher", help="apply tracked jobs' transitions to the tracking database (workers start one each)"
    )
    _connection_options(flusher)
    flusher.add_argument(
        "--database-url", metavar="URL", help="tracking database (env ASYNCTASK_DATABASE_URL)"
    )
    flusher.add_argument("--consumer", help="name in the flushers' consumer group (default: host:pid)")
    flusher.add_argument("--parent", type=int, metavar="PID", help="exit when this process is gone")
    flusher.set_defaults(run=_run_flusher)

    db = commands.add_parser("db", help="migrate the tracking database")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_commands.add_parser("upgrade", help="apply the migrations up to a revision")
    upgrade.add_argument("--revision", default="head", help="target revision (default: head, the latest)")
    downgrade = db_commands.add_parser("downgrade", help="revert the migrations down to a revision")
    downgrade.add_argument("revision", help="target revision; base removes the tracking tables")
    current = db_commands.add_parser("current", help="show the revision the database is at")
    for db_command in (upgrade, downgrade, current):
        _database_option(db_command)
        db_command.set_defaults(run=_run_db)

    tokens = commands.add_parser("tokens", help="manage the HTTP API's bearer tokens")
    tokens_commands = tokens.add_subparsers(dest="tokens_command", required=True)
    create = tokens_commands.add_parser(
        "create", help="create a token for a tenant; prints it once, on stdout"
    )
    create.add_argument("--tenant", required=True, metavar="NAME", help="the tenant the token acts as")
    create.add_argument("--label", metavar="TEXT", help="a note on what the token is for")
    revoke = tokens_commands.add_parser("revoke", help="revoke a token for good")
    revoke.add_argument("id", help="the token's id, as tokens list shows it")
    listing = tokens_commands.add_parser("list", help="show tokens (never their secrets)")
    listing.add_argument("--tenant", metavar="NAME", help="only this tenant's tokens")
    for tokens_command in (create, revoke, listing):
        _database_option(tokens_command)
        tokens_command.set_defaults(run=_run_tokens)

    api = commands.add_parser("api", help="serve the HTTP API and the example page (gunicorn)")
    _connection_options(api)
    _database_option(api)
    api.add_argument(
        "-r",
        "--require",
        action="append",
        default=[],
        metavar="MODULE",
        help="module that registers the jobs the API may submit; repeatable (env ASYNCTASK_REQUIRE)",
    )
    api.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    api.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    api.add_argument("--workers", type=int, default=2, help="gunicorn worker processes (default 2)")
    api.add_argument(
        "--threads", type=int, default=32, help="threads per worker; each open stream holds one (default 32)"
    )
    api.add_argument("--access-log", action="store_true", help="log every request to stderr")
    api.set_defaults(run=_run_api)

    demo = commands.add_parser(
        "demo",
        help="run a worker, the API and a sample task on a local SQLite file (no server needed)",
    )
    demo.add_argument(
        "--dir", default="asynctask-demo", help="folder for the database and logs (default ./asynctask-demo)"
    )
    demo.add_argument("--port", type=int, default=8000, help="the API's port, another if busy (default 8000)")
    demo.add_argument("--items", type=int, default=3000, help="rows in the sample task (default 3000)")
    demo.add_argument("--no-wait", action="store_true", help="stop everything after the summary")
    demo.set_defaults(run=_run_demo)
    return parser


def _run_demo(args: argparse.Namespace) -> int:
    from asynctask.demo.cli import run_demo

    return run_demo(args.dir, port=args.port, items=args.items, wait=not args.no_wait)


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


def _database_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="SQLAlchemy URL of the tracking database (env ASYNCTASK_DATABASE_URL, "
        "default sqlite:///asynctask.db)",
    )


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    return Settings.from_env(broker_url=args.broker, redis_url=args.redis, namespace=args.namespace, **extra)


def _run_worker(args: argparse.Namespace) -> int:
    queues = tuple(QueueSpec.parse(q) for q in args.queue) or None
    env_require = tuple(m for m in os.environ.get("ASYNCTASK_REQUIRE", "").split(",") if m)
    settings = _settings(
        args,
        queues=queues,
        concurrency=args.concurrency,
        timeout=args.timeout,
        max_jobs=args.max_jobs,
        max_memory_mb=args.max_memory,
        tag=args.tag,
        require=tuple(args.require) or env_require or None,
        log_level="INFO" if args.verbose else None,
        log_format=args.log_format,
    )
    log.setup(settings.log_level, settings.log_format)
    from asynctask.worker import supervisor

    if not supervisor.in_worker_child():
        return supervisor.supervise(args.argv, settings)
    for module in settings.require:
        load_module(module)
    from asynctask.worker import Worker
    from asynctask.worker.recycle import run_recycling

    return run_recycling(Worker(settings))


def _run_flusher(args: argparse.Namespace) -> int:
    import socket

    from asynctask.brokers.redis.flusher_process import run_flusher

    settings = _settings(args, database_url=args.database_url)
    log.setup(settings.log_level, settings.log_format)
    run_flusher(settings, args.consumer or f"{socket.gethostname()}:{os.getpid()}", args.parent)
    return 0


def _run_enqueue(args: argparse.Namespace) -> int:
    from asynctask.client import Client

    try:
        job_args = json.loads(args.args)
    except ValueError as exc:
        raise ValueError(f"ARGS must be a JSON array: {exc}") from None
    item: dict[str, Any] = {"class": args.name, "args": job_args}
    if args.queue:
        item["queue"] = args.queue
    if args.retry is not None:
        item["retry"] = _parse_retry(args.retry)
    if args.delay is not None:
        from asynctask.payload import now

        item["at"] = now() + args.delay
    elif args.at is not None:
        item["at"] = args.at
    jid = Client(_settings(args)).push(item)
    print(jid or "dropped by client middleware")
    return 0 if jid else 1


def _run_db(args: argparse.Namespace) -> int:
    from alembic.util import CommandError
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from asynctask.db import migrate

    url, source, shown = _database_url(args)
    try:
        if args.db_command == "upgrade":
            migrate.upgrade(url, args.revision)
        elif args.db_command == "downgrade":
            migrate.downgrade(url, args.revision)
        revision = migrate.current(url)
    except ArgumentError as exc:
        raise ValueError(f"{source} {shown}: {exc}") from None
    except DBAPIError as exc:
        # Driver messages span lines (psycopg adds hints); one line reads better in a shell.
        raise ValueError(f"database {shown}: {' '.join(str(exc.orig).split())}") from None
    except CommandError as exc:
        raise ValueError(f"database {shown}: {exc}") from None
    head = migrate.head()
    if revision is None:
        state = "base (no migrations applied)"
    elif revision == head:
        state = f"revision {revision} (head)"
    else:
        state = f"revision {revision} (head is {head})"
    verb = {"upgrade": "upgraded", "downgrade": "downgraded"}.get(args.db_command)
    print(f"{verb} {shown} to {state}" if verb else f"{shown} is at {state}")
    return 0


def _database_url(args: argparse.Namespace) -> tuple[str, str, str]:
    """The tracking database's URL, where it came from, and how to show it (password hidden)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    url = args.database_url or Settings.from_env().database_url
    source = "--database-url" if args.database_url else "ASYNCTASK_DATABASE_URL"
    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        # Not echoed: an unparsable URL may still hold a password.
        raise ValueError(
            f"{source} is not a database URL (like sqlite:///asynctask.db or postgresql://user@host/db)"
        ) from None
    return url, source, shown


def _run_api(args: argparse.Namespace) -> int:
    serve_api = _command("api")
    settings = _settings(args, database_url=args.database_url, require=tuple(args.require) or None)
    log.setup(settings.log_level, settings.log_format)
    return serve_api(args, settings)


def _command(name: str) -> Callable[[argparse.Namespace, Settings], int]:
    """The implementation of command ``name`` that another package provides through the
    ``asynctask.commands`` entry point group (``api`` comes with ``webapi``)."""
    found = entry_points(group="asynctask.commands", name=name)
    if not found:
        raise ImportError(
            f"no package provides the {name!r} command (an asynctask.commands entry point); "
            "reinstall asynctask (pip install asynctask, or pip install -e . in a checkout)"
        )
    command: Callable[[argparse.Namespace, Settings], int] = next(iter(found)).load()
    return command


def _run_tokens(args: argparse.Namespace) -> int:
    from sqlalchemy import inspect
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from asynctask import tokens
    from asynctask.db.engine import create_database_engine
    from asynctask.tracking.models import ApiToken

    url, source, shown = _database_url(args)
    try:
        engine = create_database_engine(url)
    except ArgumentError as exc:
        raise ValueError(f"{source} {shown}: {exc}") from None
    try:
        if not inspect(engine).has_table(ApiToken.__tablename__):
            print(
                f"asynctask: database {shown} has no API token table; run `asynctask db upgrade` first",
                file=sys.stderr,
            )
            return 1
        if args.tokens_command == "create":
            created = tokens.create_token(engine, args.tenant, args.label)
            # The token alone on stdout, so that a script can capture it; the rest is for people.
            print(created.token)
            print(
                f"token id {created.id} for tenant {created.tenant}; store it now, it is not shown again",
                file=sys.stderr,
            )
        elif args.tokens_command == "revoke":
            if not tokens.revoke_token(engine, args.id):
                print(f"asynctask: no token with id {args.id} (see asynctask tokens list)", file=sys.stderr)
                return 1
            print(f"revoked token {args.id}")
        else:
            _print_tokens(tokens.list_tokens(engine, args.tenant))
    except DBAPIError as exc:
        # Driver messages span lines (psycopg adds hints); one line reads better in a shell.
        raise ValueError(f"database {shown}: {' '.join(str(exc.orig).split())}") from None
    finally:
        engine.dispose()
    return 0


def _print_tokens(infos: list[TokenInfo]) -> None:
    rows = [("ID", "TENANT", "LABEL", "CREATED", "REVOKED")]
    rows += [
        (
            info.id,
            info.tenant,
            info.label or "-",
            info.created_at.isoformat(timespec="seconds"),
            info.revoked_at.isoformat(timespec="seconds") if info.revoked_at else "-",
        )
        for info in infos
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _parse_retry(text: str) -> bool | int:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return int(text)
