"""``asynctask api``: the HTTP API under gunicorn. asynctask's command line declares the
command's options and finds ``run_api`` through the ``asynctask.commands`` entry point group,
so the library never imports the web app.

Before serving it checks what would otherwise show only as failing requests: the modules
load, the database was migrated (a 503 "unreachable" on every request would not say so),
some job may be submitted, and the address is free. Once gunicorn listens, one line says
where, and what it serves. Its worker processes share their request metrics through a
private directory made at start and removed at exit (``webapi.metricsdir``).
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections import Counter

from asynctask import log
from asynctask.cli.commands import settings_from
from asynctask.cli.database import DatabaseUnreachable, require_database
from asynctask.cli.failures import CommandError
from asynctask.modules import load_module
from asynctask.registry import default_registry
from asynctask.settings import Settings, shown_url
from webapi.config import ApiConfig
from webapi.metricsdir import shared_metrics_dir
from webapi.server import serve

logger = logging.getLogger("asynctask.api")


def run_api(args: argparse.Namespace) -> int:
    # Named before the job modules load: one of them may import prometheus_client, which
    # chooses its mode on import.
    with shared_metrics_dir():
        return _run_api(args)


def _run_api(args: argparse.Namespace) -> int:
    settings = settings_from(
        args, require=tuple(args.require) or None, log_level="INFO" if args.verbose else None
    )
    log.setup(settings.log_level, settings.log_format)
    config = ApiConfig.from_env(settings=settings)
    for module in settings.require:
        load_module(module)
    unreachable = None
    try:
        require_database(settings.database_url)
    except DatabaseUnreachable as exc:
        unreachable = exc
    _check_address(args.host, args.port)
    # Past every reason not to start: what follows only warns.
    if unreachable is not None:
        logger.warning("%s; the API answers 503 until it does", unreachable)
    else:
        _check_connections(settings, args.workers, args.threads)
    submittable = sorted((d for d in default_registry if d.api), key=lambda d: d.name)
    if not submittable:
        logger.warning(
            "no registered job has api=True: POST /api/tasks accepts none; load a module that "
            "defines one (@asynctask.job(api=True)) with -r or ASYNCTASK_REQUIRE"
        )
    fields = {
        "url": _url(args.host, args.port),
        **_served(settings),
        "jobs": " ".join(d.name for d in submittable),
        "queues": " ".join(sorted({d.options.queue for d in submittable})),
        "workers": args.workers,
        "threads": args.threads,
    }
    serve(
        config,
        host=args.host,
        port=args.port,
        workers=args.workers,
        threads=args.threads,
        access_log=args.access_log,
        on_ready=lambda: logging.getLogger(log.LIFECYCLE).info("api listening", extra={"fields": fields}),
    )
    return 0


def _check_connections(settings: Settings, workers: int, threads: int) -> None:
    """Warn when the API's pools may hold more connections than a PostgreSQL server has left:
    under load its requests would fail (503) and the server would refuse every other client,
    the workers included."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.pool import NullPool

    from asynctask.db.engine import create_database_engine, normalize_url
    from webapi.embed import most_connections

    # Per server: one of its URLs (to ask it), and the connections wanted of it.
    urls: dict[tuple[str | None, int | None], str] = {}
    wanted_of: Counter[tuple[str | None, int | None]] = Counter()
    for url, count in most_connections(settings, threads).items():
        parsed = normalize_url(url)
        if parsed.get_backend_name() == "postgresql":
            server = (parsed.host, parsed.port)
            urls.setdefault(server, url)
            wanted_of[server] += workers * count
    for server, url in urls.items():
        wanted = wanted_of[server]
        engine = create_database_engine(url, poolclass=NullPool)
        try:
            with engine.connect() as connection:
                allowed = int(connection.execute(text("SHOW max_connections")).scalar_one())
                reserved = int(connection.execute(text("SHOW superuser_reserved_connections")).scalar_one())
                in_use = int(
                    connection.execute(
                        text("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
                    ).scalar_one()
                )
        except SQLAlchemyError as exc:
            logger.debug("connections of %s not checked: %s", shown_url(url), exc)
            continue
        finally:
            engine.dispose()
        # This check's own connection is closed by now.
        left = allowed - reserved - (in_use - 1)
        if wanted > left:
            logger.warning(
                "the API may hold %d connections to PostgreSQL at %s (%d worker(s) x %d threads), but the "
                "server has %d left (max_connections %d, %d in use): under load requests would fail with "
                "503 and the server would refuse other clients; lower --workers or --threads, or raise "
                "max_connections",
                wanted,
                shown_url(url),
                workers,
                threads,
                left,
                allowed,
                in_use - 1,
            )


def _served(settings: Settings) -> dict[str, str]:
    return {"broker": shown_url(settings.broker), "database": shown_url(settings.database_url)}


def _check_address(host: str, port: int) -> None:
    """A CommandError unless ``host:port`` can be listened on (gunicorn would retry for 5 s,
    then exit with a line per attempt)."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            # As gunicorn binds: a port left in TIME_WAIT by a previous server counts as free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise CommandError(
            f"cannot listen on {host}:{port}: {reason}; choose another --host or --port, "
            "or stop what uses this one"
        ) from None


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
