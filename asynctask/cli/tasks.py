"""``asynctask tasks``: ``show`` a task; tune a fed task while it runs (``update``), ``pause``
and ``resume`` it.

``show`` prints the task's progress, first errors, callbacks, parents and children; the others
print the task's feed as it is then, in one line. A task that does not exist, is not fed or has
ended is one line on stderr (exit status 1), a bad value is a usage error (2).
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
        if args.tasks_command == "show":
            print(described(tracking.get_task(args.id, errors=SHOWN_ERRORS)))
            return 0
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


#: First errors ``tasks show`` prints.
SHOWN_ERRORS = 5


def described(view: TaskView) -> str:
    """The task, its first errors, its callbacks, and the tasks it waits for and that wait for
    it, a line each."""
    counts = ", ".join(f"{status} {count}" for status, count in view.counts.items() if count)
    lines = [
        f"task {view.id} {view.status}: {view.done}/{view.total} done ({counts or 'no job'})",
        f"job {view.job_name} on queue {view.queue}, created {view.created_at:%Y-%m-%d %H:%M:%S}"
        + (f", ended {view.finished_at:%Y-%m-%d %H:%M:%S}" if view.finished_at else ""),
    ]
    lines += [
        f"error {e.job_id} {e.status}: {e.error_class or ''} {e.error or ''}".rstrip() for e in view.errors
    ]
    for callback in view.callbacks:
        when = f" since {callback.fired_at:%Y-%m-%d %H:%M:%S}" if callback.fired_at else ""
        lines.append(f"on {callback.kind}: {callback.job_name} (job {callback.jid}) {callback.state}{when}")
    if view.hold is not None:
        lines.append(
            f"runs if its parents {'succeeded' if view.run_if == 'success' else 'ended'}: {view.hold}"
        )
    if view.cancel_reason is not None:
        lines.append(f"cancelled: {view.cancel_reason}")
    for parent in view.parents:
        ended = (
            "not ended"
            if parent.ended_at is None
            else ("succeeded" if parent.succeeded else "did not succeed")
        )
        lines.append(f"after task {parent.task_id} ({parent.job_name}): {ended}")
    for child in view.children:
        lines.append(f"before task {child.task_id} ({child.job_name}): {child.hold}")
    if view.children_count > len(view.children):
        lines.append(f"and {view.children_count - len(view.children)} more tasks wait for it")
    return "\n".join(lines)


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
