"""Counts the Python function calls of a process that ``python -m bench.work`` starts with this
folder first on ``PYTHONPATH``, in every thread, and writes the count at exit to the file
``$BENCH_CALLS-<pid>``. Python imports ``sitecustomize`` at start-up, before any code of the
process runs; nothing is counted where the variable is unset."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from types import FrameType
from typing import Any

_prefix = os.environ.get("BENCH_CALLS")
_calls = 0


def _count(frame: FrameType, event: str, arg: Any) -> None:
    global _calls
    if event == "call":
        _calls += 1


def _write() -> None:
    with open(f"{_prefix}-{os.getpid()}", "w", encoding="utf-8") as out:
        out.write(str(_calls))


if _prefix:
    sys.setprofile(_count)
    threading.setprofile(_count)
    atexit.register(_write)
