"""The ``asynctask`` command line.

Whatever a command fails on (a server that does not answer, a database that does not exist
or was never migrated, a module given with ``-r`` that does not load, a wrong argument), it
says so in one line on stderr and exits with a non-zero status; ``-v`` adds the traceback.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    from asynctask.cli.failures import explain
    from asynctask.cli.parser import build_parser

    args = build_parser().parse_args(arguments)
    # As given: a worker passes them to its watchdog, and runs them again when it is recycled.
    args.arguments = arguments
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
