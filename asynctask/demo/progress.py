"""The demo's progress report: one line redrawn in place on a terminal, plain lines otherwise.

It reads the task as ``GET /api/tasks/<id>`` returns it (``status``, ``total``, ``done``,
``counts``, ``eta_seconds``), so the terminal shows what any API client would see.
"""

from __future__ import annotations

import shutil
import time
from typing import Any, Protocol

#: Seconds between two lines when the output is not a terminal (a log or a CI job).
PLAIN_INTERVAL = 2.0
BAR_WIDTH = 30
#: A narrower bar is left out.
MIN_BAR = 10
#: The counts always shown, in this order, with the API's names.
SHOWN_COUNTS = ("finish", "failed", "error")


class Stream(Protocol):
    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...

    def isatty(self) -> bool: ...


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def progress_text(task: dict[str, Any], rate: float | None) -> str:
    """Counts, percent, rate and ETA: ``45%  135/300 jobs  finish 120  failed 10 ... 42.1 jobs/s  ETA 3s``.

    Jobs not done are ``working`` or ``waiting`` (in their queue, or for a retry: the API says
    ``enqueue`` for both), each shown when there are some. With none working, the jobs wait,
    for a retry's delay or a free thread, and no ETA would be right: none is shown."""
    counts = task["counts"]
    parts = [f"{task['progress'] * 100:3.0f}%", f"{task['done']}/{task['total']} jobs"]
    parts += [f"{name} {counts.get(name, 0)}" for name in SHOWN_COUNTS]
    working, waiting = counts.get("working", 0), counts.get("enqueue", 0)
    if working:
        parts.append(f"working {working}")
    if waiting:
        parts.append(f"waiting {waiting}")
    if rate is not None:
        parts.append(f"{rate:.1f} jobs/s")
    eta = task.get("eta_seconds")
    if eta is not None and working:
        parts.append(f"ETA {format_duration(eta)}" if eta >= 0.5 else "ETA <1s")
    return "  ".join(parts)


def bar(fraction: float, width: int, full: str, empty: str) -> str:
    filled = min(width, max(0, round(fraction * width)))
    return full * filled + empty * (width - filled)


class ProgressLine:
    """Shows successive snapshots of one task on ``stream``."""

    def __init__(self, stream: Stream, *, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        encoding = getattr(stream, "encoding", None) or "ascii"
        self.full, self.empty = ("█", "░") if _encodes(encoding, "█░") else ("#", "-")
        self.started: float | None = None
        self.last_plain = 0.0
        self.last_text = ""
        self.drawn = False

    def show(self, task: dict[str, Any]) -> None:
        now = time.monotonic()
        if self.started is None and task["status"] != "pending":
            self.started = now
        rate = None
        if self.started is not None and now - self.started >= 1.0:
            rate = task["done"] / (now - self.started)
        text = progress_text(task, rate)
        if self.tty:
            self._redraw(task, text)
        elif now - self.last_plain >= PLAIN_INTERVAL and text != self.last_text:
            self.last_plain, self.last_text = now, text
            self.stream.write(f"progress: {text}\n")
            self.stream.flush()

    def finish(self, task: dict[str, Any]) -> None:
        """The last snapshot, always shown, and the line ended."""
        self.last_plain = 0.0
        self.last_text = ""
        self.show(task)
        self.end()

    def end(self) -> None:
        """End the redrawn line, so that what is printed next starts on a line of its own."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False

    def _redraw(self, task: dict[str, Any], text: str) -> None:
        # A line longer than the terminal wraps, and "\r" then only returns to its last part:
        # the bar gives way to the numbers, which are cut last.
        room = shutil.get_terminal_size().columns - 1
        width = min(BAR_WIDTH, room - len(text) - 3)
        line = f"[{bar(task['progress'], width, self.full, self.empty)}] {text}" if width >= MIN_BAR else text
        line = line[: max(1, room)]
        self.stream.write(f"\r{line}\x1b[K")
        self.stream.flush()
        self.drawn = True


def _encodes(encoding: str, text: str) -> bool:
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True
