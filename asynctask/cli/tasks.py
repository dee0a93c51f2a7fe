"""``asynctask tasks``: tune a fed task while it runs (``update``), ``pause`` and ``resume`` it.

Each prints the task's feed as it is then, in one line; a task that does not exist, is not
fed or has ended is one line on stderr (exit status 1), a bad value is a usage error (2).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypeVar

from asynctask.cli.commands import settings_from
from asynctask.cli.database import require_database
from asynctask.cli.failures import FAILED, CommandError
from asynctask.feeds import check_change

if TYPE_CHECKING:
    from asynctask.tracking.views import TaskView

N = TypeVar("N", int, float)


def parallel(text: str) -> int:
    return _checked("parallel", _integer(text))


def interval(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    return _checked("interval", seconds)


def priority(text: str) -> int:
    return _checked("priority", _integer(text))


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _checked(name: str, value: N) -> N:
    try:
        check_change(**{name: value})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def run_tasks(args: argparse.Namespace) -> int:
    from asynctask.errors import TaskNotFound, TaskStateError
    from asynctask.tasks.service import Tracking

    settings = settings_from(args)
    require_database(settings.database_url)
    if args.tasks_command == "update" and (args.parallel, args.interval, args.priority) == (None, None, None):
        raise CommandError("give at least one of --parallel, --interval and --priority")
    from asynctask.client import Client

    client = Client(settings)
    tracking = Tracking(client)
    try:
        if args.tasks_command == "update":
            tracking.update_task(
                args.id, parallel=args.parallel, interval=args.interval, priority=args.priority
            )
        elif args.tasks_command == "pause":
            tracking.pause_task(args.id)
        else:
            tracking.resume_task(args.id)
        print(shown(tracking.get_task(args.id, errors=0)))
    except TaskNotFound:
        raise CommandError(f"no task {args.id}", FAILED) from None
    except TaskStateError as exc:
        raise CommandError(str(exc), FAILED) from None
    finally:
        tracking.engine.dispose()
        client.broker.close()
    return 0


def shown(view: TaskView) -> str:
    """The task and its feed in one line."""
    feed = view.feed
    if feed is None:
        return f"task {view.id} {view.status}: not fed"
    state = "paused" if feed.paused else view.status
    held = "?" if feed.held is None else str(feed.held)
    eta = "" if view.eta_seconds is None else f", about {view.eta_seconds:.0f} s left"
    return (
        f"task {view.id} {state}: parallel {feed.parallel}, interval {feed.interval:g} s, "
        f"priority {feed.priority}; {held} held, {view.done}/{view.total} done{eta}"
    )
