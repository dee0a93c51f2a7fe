"""``python -m asynctask.cli.give_back OUTCOME PID BOUND IDENTITY -- ARGUMENT...``: what the
worker's watchdog process runs once the worker is gone without having stopped (``killed`` past its
stop's bound, or ``died`` otherwise). It logs what happened, pushes the jobs the worker held back
to their queues and removes its process record, with the settings of the worker's own command
line (``ARGUMENT...``).
"""

from __future__ import annotations

import io
import logging
import sys
from contextlib import redirect_stderr

from asynctask.brokers import open_broker
from asynctask.cli.commands import worker_settings
from asynctask.cli.parser import build_parser
from asynctask.settings import Settings

logger = logging.getLogger("asynctask.watchdog")


def give_back(outcome: str, pid: int, bound: float, identity: str, arguments: list[str]) -> None:
    """Log how the worker ``pid`` ended, then push the jobs it held back and remove its record."""
    settings = _worker_settings(arguments)
    fields = {"pid": pid, "identity": identity}
    if outcome == "killed":
        logger.warning(
            "worker process still running %.0f s after the stop signal (a job holding the "
            "interpreter?); killed it",
            bound,
            extra={"fields": fields},
        )
    else:
        logger.error("worker process died without stopping", extra={"fields": fields})
    try:
        broker = open_broker(settings)
        try:
            moved = broker.requeue_process(identity)
        finally:
            broker.close()
    except Exception as exc:
        logger.error(
            "could not push back the jobs of the dead worker process: %s; its peers will, "
            "once its heartbeat expires",
            exc,
            extra={"fields": fields},
        )
        return
    logger.warning(
        "%d job(s) of the dead worker process pushed back to their queues", moved, extra={"fields": fields}
    )


def _worker_settings(arguments: list[str]) -> Settings:
    """The settings of the worker's command line, with logging set up as they say."""
    # The worker has read them already: they parse, and it said anything wrong with them.
    with redirect_stderr(io.StringIO()):
        args = build_parser().parse_args(arguments)
    return worker_settings(args)


def main(argv: list[str]) -> None:
    """``OUTCOME PID BOUND IDENTITY -- ARGUMENT...``, as the watchdog process runs it."""
    outcome, pid, bound, identity, _separator, *arguments = argv
    give_back(outcome, int(pid), float(bound), identity, arguments)


if __name__ == "__main__":
    main(sys.argv[1:])
