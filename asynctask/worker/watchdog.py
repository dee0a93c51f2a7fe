"""``asynctask worker``'s watchdog, as the worker sees it.

The worker runs in the process the command started; ``Watchdog.start`` starts the small process
of ``watchdog_process`` beside it and points the interpreter's signal wakeup at the pipe between
them. The worker writes ``ENDED`` there once it has stopped (``end``), and before it replaces
itself with a fresh interpreter (recycling). The watchdog gets the worker command's own
arguments, for ``asynctask.cli.give_back`` to read its settings from if the worker is gone
without ending.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from asynctask.worker import watchdog_process
from asynctask.worker.manager import UNWIND_TIMEOUT

logger = logging.getLogger("asynctask.watchdog")

#: Seconds past ``timeout`` a worker gets to finish a graceful stop (its busy threads are
#: interrupted at ``timeout`` and given ``UNWIND_TIMEOUT``; then it pushes back its jobs).
GRACE = UNWIND_TIMEOUT + 2.0
#: How long an ended worker waits for its watchdog to exit (it does at once).
EXIT_WAIT = 5.0
PROGRAM = Path(watchdog_process.__file__)


class Watchdog:
    def __init__(self, process: subprocess.Popen[bytes], pipe: int, previous_wakeup: int) -> None:
        self.process = process
        self._pipe = pipe
        self._previous_wakeup = previous_wakeup

    @classmethod
    def start(cls, identity: str, timeout: float, arguments: Sequence[str]) -> Watchdog:
        """Start the watchdog of this process, a worker running as ``identity`` that stops within
        ``timeout`` seconds, started with ``arguments`` (main thread only: it takes the wakeup)."""
        read, write = os.pipe()
        try:
            # The C handler never blocks on the pipe: a byte it cannot write is dropped.
            os.set_blocking(write, False)
            bound = repr(timeout + GRACE)
            command = [sys.executable, "-I", "-S", str(PROGRAM), str(read), str(os.getpid()), bound, identity]
            process = subprocess.Popen([*command, *arguments], stdin=subprocess.DEVNULL, pass_fds=(read,))
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        return cls(process, write, signal.set_wakeup_fd(write, warn_on_full_buffer=False))

    def end(self) -> None:
        """The worker has stopped: the watchdog exits, and this process may exit or replace itself."""
        signal.set_wakeup_fd(self._previous_wakeup)
        # A watchdog already gone (killed by someone) has nothing to be told.
        with suppress(BrokenPipeError, BlockingIOError):
            os.write(self._pipe, bytes([watchdog_process.ENDED]))
        os.close(self._pipe)
        try:
            self.process.wait(EXIT_WAIT)
        except subprocess.TimeoutExpired:
            fields = {"pid": self.process.pid}
            logger.error("the watchdog process did not exit; killing it", extra={"fields": fields})
            self.process.kill()
            self.process.wait()
