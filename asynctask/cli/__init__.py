"""The ``asynctask`` command line.

Whatever a command fails on (a server that does not answer, a database that does not exist
or was never migrated, a module given with ``-r`` that does not load, a wrong argument), it
says so in one line on stderr and exits with a non-zero status; ``-v`` adds the traceback.
"""

from __future__ import annotations

import io
import sys
import traceback
from collections.abc import Sequence
from contextlib import redirect_stderr
from typing import TYPE_CHECKING

from asynctask.worker.contract import in_worker_child

if TYPE_CHECKING:
    from asynctask.settings import Settings

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if _command(arguments) == "worker" and not in_worker_child():
        # The supervisor: its child runs this command line and says what is wrong with it.
        from asynctask.worker.supervisor import supervise

        return supervise(arguments, lambda: _worker_settings(arguments))
    from asynctask.cli.failures import explain
    from asynctask.cli.parser import build_parser

    args = build_parser().parse_args(arguments)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        failure = explain(exc)
        if args.verbose:
            traceback.print_exc()
        print(f"asynctask: {failure}", file=sys.stderr, flush=True)
        return failure.status


def _command(arguments: list[str]) -> str | None:
    """The command named in ``arguments``, after the options every command takes."""
    for argument in arguments:
        if argument not in ("-v", "--verbose"):
            return argument
    return None


def _worker_settings(arguments: list[str]) -> Settings:
    """The settings of a ``worker`` command line, with logging set up as they say; the defaults
    if the arguments or the environment are wrong (the child reports that, and exits)."""
    from asynctask.cli.commands import worker_settings
    from asynctask.cli.parser import build_parser
    from asynctask.settings import Settings

    try:
        # The child prints what argparse would: one complaint, not two.
        with redirect_stderr(io.StringIO()):
            return worker_settings(build_parser().parse_args(arguments))
    except (Exception, SystemExit):
        return Settings()
