"""``asynctask status``: the broker at a glance, as ``sidekiqmon`` or ``rq info`` show it.

Lifetime and today's processed and failed counts, every queue with its size, latency (the
age of its oldest job) and whether it is paused, the scheduled, retry and dead sets' sizes,
and each live process with its busy threads. ``--json`` prints the same as one JSON object;
``--watch SECONDS`` prints it again every that many seconds until interrupted.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from asynctask.cli.commands import store_settings

if TYPE_CHECKING:
    from asynctask.settings import Settings

#: The ANSI sequence that clears a terminal and moves to its top, between two watched reports.
CLEAR = "\x1b[H\x1b[2J"


def run_status(args: argparse.Namespace) -> int:
    settings = store_settings(args)
    while True:
        report = read(settings)
        if args.watch:
            print(CLEAR, end="")
        print(json.dumps(report, indent=2) if args.json else shown(report), flush=True)
        if not args.watch:
            return 0
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0


def read(settings: Settings) -> dict[str, Any]:
    """The report, read with a few round trips plus three per queue (size, latency, paused)."""
    from asynctask.api import ProcessSet, Queue, Stats

    stats = Stats(settings=settings)
    today = datetime.now(UTC).date()
    history = stats.history(days=1, start=today)
    queues = [
        {"name": queue.name, "size": queue.size, "latency": round(queue.latency, 3), "paused": queue.paused}
        for queue in Queue.all(settings=settings)
    ]
    processes = [
        {
            "identity": p.identity,
            "hostname": p.hostname,
            "pid": p.pid,
            "tag": p.tag,
            "queues": p.queues,
            "busy": p.busy,
            "concurrency": p.concurrency,
            "started_at": p.started_at,
            "quiet": p.is_quiet,
        }
        for p in ProcessSet(settings=settings)
    ]
    return {
        "processed": stats.processed,
        "failed": stats.failed,
        "today": {"processed": history.processed[today], "failed": history.failed[today]},
        "queues": queues,
        "scheduled": stats.scheduled_size,
        "retry": stats.retry_size,
        "dead": stats.dead_size,
        "stopped": stats.stopped_size,
        "data_losses": stats.data_losses,
        "processes": processes,
    }


def shown(report: dict[str, Any]) -> str:
    today = report["today"]
    lines = [
        f"processed {report['processed']:,}, failed {report['failed']:,} "
        f"(today {today['processed']:,} and {today['failed']:,})",
        f"sets: scheduled {report['scheduled']:,}, retry {report['retry']:,}, dead {report['dead']:,}, "
        f"stopped {report['stopped']:,}",
    ]
    if report["data_losses"]:
        lines.append(
            f"Redis lost its data {report['data_losses']:,} time(s): the jobs it held were gone, their "
            "tracked events marked lost (keep Redis persistent: appendonly yes)"
        )
    queues = report["queues"]
    lines.append(f"queues: {len(queues)}, {sum(q['size'] for q in queues):,} jobs waiting")
    width = max((len(q["name"]) for q in queues), default=0)
    lines += [
        f"  {q['name']:<{width}}  {q['size']:>9,}  latency {q['latency']:.1f} s" + ("  paused" * q["paused"])
        for q in queues
    ]
    processes = report["processes"]
    busy = sum(p["busy"] for p in processes)
    threads = sum(p["concurrency"] for p in processes)
    lines.append(f"processes: {len(processes)}, {busy} of {threads} threads busy")
    now = time.time()
    for p in processes:
        tag = f" [{p['tag']}]" if p["tag"] else ""
        quiet = ", quiet" if p["quiet"] else ""
        up = _duration(now - p["started_at"]) if p["started_at"] else "-"
        lines.append(
            f"  {p['hostname']}:{p['pid']}{tag}  busy {p['busy']}/{p['concurrency']}  "
            f"queues {','.join(p['queues'])}  up {up}{quiet}"
        )
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(max(0.0, seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
