"""Supervisor: ``asynctask worker`` runs the worker in a child process and watches it.

A job that holds the GIL (a long C call that never releases it) stops every Python thread
of its process, the signal handlers and the heartbeat included: a worker alone cannot keep
its ``timeout`` on TERM. Its parent can. The parent is small (it never imports job code nor
runs jobs) and only:

- forwards TERM, INT, TSTP and TTIN to the child (a terminal's Ctrl-C reaches both: the
  child is in the parent's process group, so that a debugger in a job still has the
  terminal; the signals are idempotent);
- on TERM or INT, kills the child (SIGKILL) if it is still alive ``timeout + GRACE``
  seconds later (after asking it, with TTIN, to log where its threads are), then gives back
  the jobs it held and removes its process record (``Broker.requeue_process``): the worker
  exits within ``timeout`` plus a few seconds whatever its jobs do, and loses none;
- does the same for a child that died of a signal (the OOM killer's, say), rather than
  leaving its jobs until its heartbeat expires, and exits with 128 + the signal;
- starts a new child at once when one exits with ``RECYCLE_EXIT`` (it passed
  ``max_jobs`` or ``max_memory_mb``), unless it was told to stop;
- otherwise exits with the child's exit code (a remote TERM, sent through the broker to
  the child, ends both).

The parent starts its first child before it reads its command line: the child parses the
same arguments, loads the settings and says what is wrong with them, and the parent reads them
only when it needs them (a stop signal's deadline, a dead child's jobs, a line to log). A worker
thus starts as soon as one interpreter has loaded the runtime, and the parent holds little more
than an interpreter.

The parent gives each child its identity (holding the parent's pid, the one to signal),
so that it knows whose jobs to give back. On Linux the child is killed if the parent dies,
even of SIGKILL (``PR_SET_PDEATHSIG``): nothing is left behind, and the child's jobs are
recovered by its peers once its heartbeat expires, as for any killed worker.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from asynctask.worker.contract import IDENTITY_ENV, RECYCLE_EXIT, UNWIND_TIMEOUT, new_identity

if TYPE_CHECKING:
    from asynctask.settings import Settings

logger = logging.getLogger("asynctask.supervisor")

#: Seconds past ``timeout`` the child gets to finish a graceful stop (its busy threads are
#: interrupted at ``timeout`` and given ``UNWIND_TIMEOUT``; then it pushes back its jobs).
GRACE = UNWIND_TIMEOUT + 2.0
#: How long a child past its deadline is given to log its threads' stacks before it is killed.
DUMP_WAIT = 0.5
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGTSTP, signal.SIGTTIN)
STOPPING = (signal.SIGTERM, signal.SIGINT)
#: From <sys/prctl.h>.
PR_SET_PDEATHSIG = 1


def supervise(argv: Sequence[str], read_settings: Callable[[], Settings]) -> int:
    """Run ``asynctask <argv>`` (a ``worker`` command) as supervised children until it stops;
    return the exit code. ``read_settings`` gives the command's settings, with logging set up
    as they say, and never raises (defaults where the command line is wrong: the child says
    so); it is called once, when first needed."""
    return Supervisor([sys.executable, "-m", "asynctask", *argv], read_settings).run()


class Supervisor:
    def __init__(self, command: list[str], read_settings: Callable[[], Settings]) -> None:
        self.command = command
        self._read_settings = read_settings
        self._settings: Settings | None = None
        #: When the child gets killed: ``timeout + GRACE`` after the first TERM or INT.
        self.deadline: float | None = None
        #: Whether the supervisor killed the child (at the deadline).
        self._killed = False
        self._wakeup, self._wakeup_write = os.pipe()
        self._die_with_parent = _parent_death_signal(os.getpid())

    def run(self) -> int:
        os.set_blocking(self._wakeup, False)
        os.set_blocking(self._wakeup_write, False)
        # Signals only write their number to the pipe: the loop acts on them, so that none is
        # handled halfway through another.
        previous_fd = signal.set_wakeup_fd(self._wakeup_write)
        previous = {signum: signal.signal(signum, _note) for signum in (*FORWARDED, signal.SIGCHLD)}
        try:
            return self._supervise()
        finally:
            for signum, handler in previous.items():
                # Once stopping, a late copy of the stop signal (the group's, a second Ctrl-C)
                # must not kill the process on its way out.
                stopped = signum in STOPPING and self.deadline is not None
                signal.signal(signum, signal.SIG_IGN if stopped else handler)
            signal.set_wakeup_fd(previous_fd)
            os.close(self._wakeup)
            os.close(self._wakeup_write)

    @property
    def settings(self) -> Settings:
        """The command's settings, read on first use (logging is set up as they say then)."""
        if self._settings is None:
            self._settings = self._read_settings()
        return self._settings

    def _logger(self) -> logging.Logger:
        """The parent's logger, once the settings have set logging up."""
        _ = self.settings
        return logger

    def _supervise(self) -> int:
        child, identity = self._spawn()
        while True:
            try:
                code = child.poll()
                if code is None:
                    self._wait(child, identity)
                    continue
                if code < 0:
                    if not self._killed:
                        self._logger().error(
                            "worker process died of %s",
                            signal.Signals(-code).name,
                            extra={"fields": {"pid": child.pid, "identity": identity}},
                        )
                    self._give_back(identity)
                    return 128 - code
                if code == RECYCLE_EXIT:
                    if self.deadline is not None:
                        return 0
                    child, identity = self._spawn()
                    continue
                return code
            except Exception:
                # The parent must outlive whatever goes wrong, or the child dies with it.
                self._logger().exception("supervisor error", extra={"fields": {"pid": child.pid}})
                time.sleep(0.1)

    def _wait(self, child: subprocess.Popen[bytes], identity: str) -> None:
        """Wait for a signal or the deadline; forward signals; kill the child at the deadline."""
        timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        select.select([self._wakeup], [], [], timeout)
        try:
            received = os.read(self._wakeup, 64)
        except BlockingIOError:
            received = b""
        for signum in received:
            if signum not in FORWARDED:
                continue
            if child.poll() is None:
                child.send_signal(signum)
            if signum in STOPPING and self.deadline is None:
                # Timed from the signal (read first): the settings may be read only now.
                self.deadline = time.monotonic() + self.settings.timeout + GRACE
        if self.deadline is not None and time.monotonic() >= self.deadline and child.poll() is None:
            logger.warning(
                "worker process still running %.0f s after the stop signal (a job holding the "
                "interpreter?); killing it",
                self.settings.timeout + GRACE,
                extra={"fields": {"pid": child.pid, "identity": identity}},
            )
            self._killed = True
            # Its threads' stacks in its log, if any of them can still run: where it was stuck.
            child.send_signal(signal.SIGTTIN)
            try:
                child.wait(DUMP_WAIT)
            except subprocess.TimeoutExpired:
                pass
            child.kill()
            child.wait()

    def _spawn(self) -> tuple[subprocess.Popen[bytes], str]:
        identity = new_identity(os.getpid())
        child = subprocess.Popen(
            self.command, env={**os.environ, IDENTITY_ENV: identity}, preexec_fn=self._die_with_parent
        )
        return child, identity

    def _give_back(self, identity: str) -> None:
        """The child is dead: push its jobs back and remove its record (its peers would, but
        only once its heartbeat expired)."""
        from asynctask.brokers import open_broker

        try:
            broker = open_broker(self.settings)
            try:
                moved = broker.requeue_process(identity)
            finally:
                broker.close()
        except Exception as exc:
            logger.error(
                "could not push back the jobs of the dead worker process: %s; its peers will, "
                "once its heartbeat expires",
                exc,
                extra={"fields": {"identity": identity}},
            )
            return
        logger.warning(
            "%d job(s) of the dead worker process pushed back to their queues",
            moved,
            extra={"fields": {"identity": identity}},
        )


def _note(_signum: int, _frame: object) -> None:
    """The wakeup fd carries the signal; the handler only keeps it from its default action."""


def _parent_death_signal(parent: int) -> Callable[[], None] | None:
    """What the child runs before exec so that it is killed when ``parent`` dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    # Loaded here, in the parent: the forked child only calls it.
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def die_with_parent() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
        if os.getppid() != parent:
            # The parent died between fork and prctl: no signal will come.
            os._exit(1)

    return die_with_parent
