"""The demo's output, and noticing that nobody reads it any more.

``asynctask demo | head -5`` closes the pipe after five lines; a closed terminal window hangs
up the terminal. Either way the demo must stop its worker and API (they run in sessions of
their own, so nothing else stops them) instead of dying of the failed write.
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable
from typing import TextIO


class Output:
    """A text stream that calls ``on_gone`` once, and then drops what is written, when its
    reader is gone."""

    def __init__(self, stream: TextIO, on_gone: Callable[[], None]) -> None:
        self.stream = stream
        self.on_gone = on_gone
        self.gone = False
        self.encoding = getattr(stream, "encoding", None) or "ascii"
        try:
            self._fd: int | None = stream.fileno()
        except (OSError, ValueError, AttributeError):
            self._fd = None

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self.stream.write(text)
            except OSError:
                self._lost()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except OSError:
                self._lost()

    def isatty(self) -> bool:
        return not self.gone and self.stream.isatty()

    def check(self) -> bool:
        """Whether the reader is gone, looking without writing (the demo may be silent for
        minutes while it waits)."""
        if not self.gone and self._fd is not None and _hung_up(self._fd):
            self._lost()
        return self.gone

    def _lost(self) -> None:
        self.gone = True
        if self._fd is not None:
            # What is still buffered goes nowhere: flushing it at exit would fail again, and
            # print "Exception ignored ... BrokenPipeError" on stderr.
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._fd)
            finally:
                os.close(devnull)
        self.on_gone()


def _hung_up(fd: int) -> bool:
    """Whether the other end of ``fd`` is closed: a pipe's reader exited (POLLERR) or a
    terminal hung up (POLLHUP). A regular file never is."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))
