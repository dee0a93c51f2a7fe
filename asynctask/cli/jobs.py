"""``asynctask jobs stop|resume JID`` and ``asynctask jobs stopped``: resumable jobs by jid.

``stop`` prints whether the job is stopped (it waited, and was parked without running) or
stopping (it runs: its worker parks it at its next checkpoint); ``resume`` prints the queue
the job went back to. A job that does not exist, or cannot do what was asked in its state,
is one line on stderr (exit status 1). ``stopped`` lists the stopped set, latest first: when
the job stopped, jid, class, queue and the cursor it continues from.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from asynctask.cli.commands import store_settings
from asynctask.cli.database import require_database
from asynctask.cli.failures import FAILED, CommandError
from asynctask.cli.sets import MESSAGE_CHARS, printable

if TYPE_CHECKING:
    from asynctask.settings import Settings


def run_jobs(args: argparse.Namespace) -> int:
    from asynctask.api import StoppedSet

    settings = store_settings(args)
    if args.jobs_command == "stopped":
        stopped = StoppedSet(settings=settings)
        shown = 0
        for entry in stopped:
            if shown == args.limit:
                print(f"... {stopped.size - shown:,} more (--limit)")
                break
            when = entry.at.strftime("%Y-%m-%d %H:%M:%S UTC")
            cursor = printable(json.dumps(entry.get("cursor")))[:MESSAGE_CHARS]
            name = printable(entry.display_class or "?")
            print(f"{when}  {entry.jid}  {name} on {printable(entry.queue)}  cursor {cursor}")
            shown += 1
        if not shown:
            print("no job is stopped")
        return 0
    return _control(args, settings)


def _control(args: argparse.Namespace, settings: Settings) -> int:
    from asynctask.client import Client
    from asynctask.errors import JobNotFound, JobStateError
    from asynctask.tasks.service import Tracking

    require_database(settings.database_url)
    client = Client(settings)
    tracking = Tracking(client)
    jid = printable(args.jid)
    try:
        if args.jobs_command == "stop":
            print(f"job {jid} {tracking.stop_job(args.jid)}")
        else:
            print(f"job {jid} resumed on {printable(tracking.resume_job(args.jid))}")
    except JobNotFound:
        raise CommandError(f"no job {jid}", FAILED) from None
    except JobStateError as exc:
        raise CommandError(printable(str(exc)), FAILED) from None
    finally:
        tracking.engine.dispose()
        client.broker.close()
    return 0
