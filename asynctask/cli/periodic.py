"""``asynctask periodic``: list the broker's periodic schedules, ``pause`` and ``resume`` one.

``list`` prints one line per schedule: its name, cron and zone, job and queue, whether it is
paused, its next run and its last tick (UTC). ``pause NAME`` and ``resume NAME`` print the
schedule as it is then; a name the broker does not know is one line on stderr (exit status 1).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from asynctask.cli.commands import store_settings
from asynctask.cli.failures import FAILED, CommandError

if TYPE_CHECKING:
    from asynctask.api import PeriodicEntry


def run_periodic(args: argparse.Namespace) -> int:
    from asynctask.api import PeriodicSet

    schedules = PeriodicSet(settings=store_settings(args))
    if args.periodic_command == "list":
        entries = schedules.entries()
        for listed in entries:
            print(shown(listed))
        if not entries:
            print("no periodic schedule: none is declared by a live worker")
        return 0
    found = schedules.pause(args.name) if args.periodic_command == "pause" else schedules.resume(args.name)
    entry = schedules.get(args.name) if found else None
    if entry is None:
        raise CommandError(f"no periodic schedule {args.name!r}", FAILED)
    print(shown(entry))
    return 0


def shown(entry: PeriodicEntry) -> str:
    r = entry.record
    state = "paused" if r.paused else "active"
    return (
        f"{r.name}: {state}, '{r.cron}' {r.tz}, job {r.job} on {r.queue}; "
        f"next {_when(entry.next_run)}, last {_when(r.last)}"
    )


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
