"""The commands: ``worker`` runs jobs, ``enqueue`` pushes one from a shell, ``db`` migrates
the tracking database, ``tokens`` manages the HTTP API's bearer tokens, ``flusher`` applies
tracking for a Redis worker, ``demo`` shows it all on a SQLite file (``api`` is in its own
module). Each returns its exit status or raises what ``failures.explain`` makes one line of."""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asynctask import log
from asynctask.cli.database import DatabaseUnreachable, require_database, shown_database_url, sqlite_file
from asynctask.cli.failures import FAILED, CommandError, one_line
from asynctask.modules import load_module
from asynctask.settings import QueueSpec, Settings, check_url

if TYPE_CHECKING:
    from asynctask.tokens import TokenInfo


#: glibc's ``mallopt`` parameter for the number of malloc arenas, and the number a worker uses.
M_ARENA_MAX = -8
MALLOC_ARENAS = 2
#: The signals that stop a worker.
STOPS = (signal.SIGTERM, signal.SIGINT)
#: The options that give a URL, with their ``Settings`` field and the kind of URL they take.
URL_OPTIONS = (
    ("--broker", "broker", "broker"),
    ("--redis", "redis", "Redis"),
    ("--database-url", "database_url", "database"),
)


def settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    # Checked before the settings are made, so that a wrong URL is said to come from its option.
    for option, name, kind in URL_OPTIONS:
        url = getattr(args, name, None)
        if url:
            check_url(option, url, kind)
    return Settings.from_env(
        broker_url=args.broker,
        redis_url=args.redis,
        namespace=args.namespace,
        database_url=args.database_url,
        **extra,
    )


def store_settings(args: argparse.Namespace) -> Settings:
    """The settings of a command that reads or changes the broker's store: with a SQL broker,
    only once its database is there with its tables (the first query would otherwise create
    an empty SQLite file, which a later command takes for a database)."""
    settings = settings_from(args)
    if not settings.uses_redis:
        require_database(settings.broker)
    return settings


def worker_settings(args: argparse.Namespace) -> Settings:
    """A ``worker`` command's settings; logging is set up as they say."""
    queues = tuple(QueueSpec.parse(q) for q in args.queue) or None
    settings = settings_from(
        args,
        queues=queues,
        concurrency=args.concurrency,
        async_concurrency=args.async_concurrency,
        timeout=args.timeout,
        max_jobs=args.max_jobs,
        max_memory_mb=args.max_memory,
        cpu_pinning=args.cpu_pinning,
        tag=args.tag,
        require=tuple(args.require) or None,
        log_level="INFO" if args.verbose else None,
        log_format=args.log_format,
    )
    log.setup(settings.log_level, settings.log_format)
    return settings


def run_worker(args: argparse.Namespace) -> int:
    """The worker, in this process, with its watchdog beside it; recycled, it runs again in a fresh
    interpreter that takes this process's place."""
    settings = worker_settings(args)
    for module in settings.require:
        load_module(module)
    named = bool(args.database_url or os.environ.get("ASYNCTASK_DATABASE_URL"))
    _check_worker_database(settings, explicit=named)
    from asynctask.worker import Worker
    from asynctask.worker.recycle import run_recycling
    from asynctask.worker.watchdog import Watchdog

    _limit_malloc_arenas()
    worker = Worker(settings)
    watchdog = Watchdog.start(worker.identity, settings.timeout, args.arguments)
    try:
        recycled = run_recycling(worker)
    finally:
        watchdog.end()
    if recycled:
        # Held until the fresh worker's handlers are set (it unblocks them): a stop that comes
        # while this one gives way is then obeyed by that one, not lost between the two.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
        if not worker.stop_signalled:
            _replace_process(args.arguments)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
    _ignore_late_stops()
    return 0


def _limit_malloc_arenas() -> None:
    """Two malloc arenas for the worker's threads rather than glibc's one per thread (up to 8 per
    core): they run Python under one GIL, so more arenas buy no parallelism, only memory (about
    1 MiB of a 36 MiB worker). ``MALLOC_ARENA_MAX``, when set, is left to glibc."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return
    # glibc's; other C libraries (musl) have no mallopt, and nothing to tune.
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(M_ARENA_MAX, MALLOC_ARENAS)


def _replace_process(arguments: list[str]) -> None:
    """Run the worker command again in this process (same pid, fresh memory)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "asynctask", *arguments])


def _ignore_late_stops() -> None:
    """The worker has stopped and its process exits: a stop signal still on its way (the process
    group's copy of one) has nothing left to stop. Python puts the default action back while the
    interpreter exits, which would make that late copy kill the process and turn a clean stop
    into a death by signal."""
    for signum in STOPS:
        signal.signal(signum, signal.SIG_IGN)


def _check_worker_database(settings: Settings, *, explicit: bool) -> None:
    """A SQL broker's database that does not exist or was never migrated stops the worker; a
    server that does not answer yet does not (the worker waits for its broker).

    A Redis worker needs its tracking database only for tracked jobs, and runs the others
    without it: what is wrong with it is a warning, and only when one was named (an unused
    default is nothing to warn about). A flusher process that starts with the worker checks it
    instead (``run_flusher``), so that the worker's start never waits for SQLAlchemy."""
    if not settings.uses_redis:
        with suppress(DatabaseUnreachable):
            require_database(settings.broker)
        return
    if settings.tracking and explicit and not settings.flusher_starts_with_worker:
        problem = _tracking_database_problem(settings.database_url)
        if problem is not None:
            from asynctask.brokers.redis.flusher_process import UNTRACKED_MEANWHILE

            logging.getLogger("asynctask.tracking").warning("%s; %s", problem, UNTRACKED_MEANWHILE)


def _tracking_database_problem(url: str) -> str | None:
    """What stops tracking into the database at ``url`` (missing, not migrated), or None; a
    server that does not answer yet is not one: writes wait for it."""
    try:
        require_database(url)
    except DatabaseUnreachable:
        return None
    except CommandError as exc:
        return str(exc)
    return None


def run_flusher(args: argparse.Namespace) -> int:
    import socket

    from asynctask.brokers.redis.flusher_process import run_flusher

    settings = settings_from(args)
    log.setup(settings.log_level, settings.log_format)
    consumer = args.consumer or f"{socket.gethostname()}:{os.getpid()}"
    run_flusher(settings, consumer, args.parent, lambda: _tracking_database_problem(settings.database_url))
    return 0


def run_enqueue(args: argparse.Namespace) -> int:
    from asynctask.client import Client

    try:
        job_args = json.loads(args.args)
    except ValueError as exc:
        raise CommandError(f"ARGS must be a JSON array: {exc}") from None
    if not isinstance(job_args, list):
        raise CommandError(f"ARGS must be a JSON array, not {args.args}")
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
    settings = store_settings(args)
    from asynctask.tasks.listeners import no_worker

    client = Client(settings)
    try:
        jid = client.push(item)
        print(jid or "dropped by client middleware")
        if not jid:
            return FAILED
        # A job on a queue no worker takes waits for ever without a word: say it.
        warning = no_worker(client, args.queue or "default", "the job waits")
    finally:
        client.close()
    if warning is not None:
        print(f"warning: {warning.message}", file=sys.stderr)
    return 0


def run_db(args: argparse.Namespace) -> int:
    url, source, shown = _database_url(args)
    if args.db_command != "upgrade":
        # Only an upgrade may create the SQLite file.
        require_database(url, tables=False)
    with _removed_if_failed(sqlite_file(url)):
        return _migrate(args, url, source, shown)


def _migrate(args: argparse.Namespace, url: str, source: str, shown: str) -> int:
    from alembic.util import CommandError as AlembicError
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from asynctask.db import migrate

    try:
        if args.db_command == "upgrade":
            migrate.upgrade(url, args.revision)
        elif args.db_command == "downgrade":
            migrate.downgrade(url, args.revision)
        revision = migrate.current(url)
    except ArgumentError as exc:
        raise CommandError(f"{source} {shown}: {exc}") from None
    except DBAPIError as exc:
        raise CommandError(f"database {shown}: {one_line(exc.orig)}") from None
    except AlembicError as exc:
        raise CommandError(f"database {shown}: {exc}") from None
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


@contextmanager
def _removed_if_failed(path: Path | None) -> Iterator[None]:
    """Remove the SQLite file at ``path`` if the block created it and failed: a failed
    upgrade leaves no empty database behind, which later commands would take for one."""
    existed = path is None or path.exists()
    try:
        yield
    except BaseException:
        if not existed and path is not None:
            for end in ("", "-wal", "-shm", "-journal"):
                path.with_name(path.name + end).unlink(missing_ok=True)
        raise


def _database_url(args: argparse.Namespace) -> tuple[str, str, str]:
    """The tracking database's URL, where it came from, and how to show it (password hidden)."""
    url = args.database_url or Settings.from_env().database_url
    source = "--database-url" if args.database_url else "ASYNCTASK_DATABASE_URL"
    if args.database_url:
        check_url(source, url, "database")
    return url, source, shown_database_url(url, source)


def run_tokens(args: argparse.Namespace) -> int:
    from sqlalchemy import inspect
    from sqlalchemy.exc import DBAPIError

    from asynctask import tokens
    from asynctask.db.engine import create_database_engine
    from asynctask.tracking.models import ApiToken

    if args.tokens_command == "create" and args.tenant is None and not args.operator:
        raise CommandError("tokens create needs --tenant NAME, or --operator for the deployment's token")
    url, _source, shown = _database_url(args)
    require_database(url, tables=False)
    engine = create_database_engine(url)
    try:
        if not inspect(engine).has_table(ApiToken.__tablename__):
            raise CommandError(f"database {shown} has no API token table; run `asynctask db upgrade` first")
        if args.tokens_command == "create":
            created = tokens.create_token(engine, args.tenant, args.label, operator=args.operator)
            # The token alone on stdout, so that a script can capture it; the rest is for people.
            print(created.token)
            if created.tenant is None:
                whose = "the deployment (an operator of every tenant)"
            elif created.operator:
                whose = f"an operator of tenant {created.tenant}"
            else:
                whose = f"tenant {created.tenant}"
            print(f"token id {created.id} for {whose}; store it now, it is not shown again", file=sys.stderr)
        elif args.tokens_command == "revoke":
            if not tokens.revoke_token(engine, args.id):
                raise CommandError(f"no token with id {args.id} (see asynctask tokens list)", FAILED)
            print(f"revoked token {args.id}")
        else:
            _print_tokens(tokens.list_tokens(engine, args.tenant))
    except DBAPIError as exc:
        raise CommandError(f"database {shown}: {one_line(exc.orig)}") from None
    finally:
        engine.dispose()
    return 0


def _print_tokens(infos: list[TokenInfo]) -> None:
    rows = [("ID", "TENANT", "OPERATOR", "LABEL", "CREATED", "REVOKED")]
    rows += [
        (
            info.id,
            info.tenant or "-",
            "yes" if info.operator else "no",
            info.label or "-",
            info.created_at.isoformat(timespec="seconds"),
            info.revoked_at.isoformat(timespec="seconds") if info.revoked_at else "-",
        )
        for info in infos
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def run_demo(args: argparse.Namespace) -> int:
    from asynctask.demo.cli import run_demo

    return run_demo(args.dir, port=args.port, items=args.items, wait=not args.no_wait)


def _parse_retry(text: str) -> bool | int:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        raise CommandError(f"--retry must be true, false or a number, not {text!r}") from None
