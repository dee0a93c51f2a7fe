"""``asynctask retry|dead list|retry|delete`` and ``asynctask queue clear|pause|resume``: the
failed jobs and the queues from a shell, on any broker.

``list`` prints the set's entries, latest first, one line each: when (the retry's time, or the
death's), jid, class and queue, ``retry_count`` and the error. ``retry`` enqueues entries now
(as "Retry now" in Sidekiq's web UI: the next failure counts as the same attempt), ``delete``
removes them; each takes jids, or ``--all``. A jid the set does not hold is one line on stderr
and exit status 1, after the others were done.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from asynctask.cli.commands import store_settings
from asynctask.cli.failures import FAILED, CommandError

if TYPE_CHECKING:
    from asynctask.api import JobSet, SortedEntry

#: Characters of an error message a listed line keeps.
MESSAGE_CHARS = 120


def run_set(args: argparse.Namespace) -> int:
    from asynctask.api import DeadSet, RetrySet

    kind = RetrySet if args.set_name == "retry" else DeadSet
    jobs = kind(settings=store_settings(args))
    if args.set_command == "list":
        shown = 0
        for entry in jobs:
            if shown == args.limit:
                print(f"... {jobs.size - shown:,} more (--limit)")
                break
            print(line(entry))
            shown += 1
        if not shown:
            print(f"the {args.set_name} set is empty")
        return 0
    if not args.all and not args.jids:
        raise CommandError(f"{args.set_command}: give jids, or --all")
    if args.all:
        done = jobs.retry_all() if args.set_command == "retry" else jobs.clear()
        print(f"{_verb(args.set_command)} {done:,} job(s) of the {args.set_name} set")
        return 0
    return _each(jobs, args.set_command, args.jids)


def run_queue(args: argparse.Namespace) -> int:
    from asynctask.api import Queue

    queue = Queue(args.name, settings=store_settings(args))
    if args.queue_command == "clear":
        cleared = queue.clear()
        print(f"cleared {cleared:,} job(s) from the queue {printable(args.name)!r}")
        return 0
    # A name no job can carry is a ValueError: the command's usage error (``failures.explain``).
    if args.queue_command == "pause":
        queue.pause()
    else:
        queue.resume()
    print(f"{args.queue_command}d the queue {printable(args.name)!r} ({queue.size:,} job(s) waiting)")
    return 0


def line(entry: SortedEntry) -> str:
    when = entry.at.strftime("%Y-%m-%d %H:%M:%S UTC")
    if entry.item is None or not entry.valid:
        return f"{when}  not a job: {printable(str(entry.value))[:MESSAGE_CHARS]}"
    count = "-" if entry.retry_count is None else entry.retry_count
    error = f"{entry.error_class or '?'}: {entry.error_message or ''}"
    return (
        f"{when}  {entry.jid}  {printable(entry.display_class or '?')} on {printable(entry.queue)}"
        f"  retry_count {count}  {printable(error)[:MESSAGE_CHARS]}"
    )


def printable(text: str) -> str:
    """``text`` with its control characters escaped: a job's data must not drive the terminal
    (colours, cursor moves, a cleared screen)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _each(jobs: JobSet, command: str, jids: list[str]) -> int:
    missing = []
    for jid in jids:
        entry = jobs.find_job(jid)
        done = entry is not None and (entry.retry() if command == "retry" else entry.delete())
        if done:
            print(f"{_verb(command)} {jid}")
        else:
            missing.append(jid)
    for jid in missing:
        print(f"no job {printable(jid)} in the {jobs.name} set", file=sys.stderr)
    return FAILED if missing else 0


def _verb(command: str) -> str:
    return "retried" if command == "retry" else "deleted"
