"""The watchdog process of ``asynctask worker``: bounds the worker's stop, and gives back the jobs
of a worker that died.

A job that holds the GIL (a long C call that never releases it) stops every Python thread of
its process, the signal handlers and the heartbeat included: a worker alone cannot keep its
``timeout`` on TERM. Another process can. The worker starts this one beside itself and writes to
it through a pipe: the interpreter's C-level signal handler writes each signal's number there
(``signal.set_wakeup_fd``), which needs no GIL, and the worker writes ``ENDED`` once it has
stopped. This process then:

- on TERM or INT, kills the worker (SIGKILL) if it is still alive ``bound`` seconds later
  (after asking it, with TTIN, to log where its threads are);
- once the worker is gone without having written ``ENDED`` (killed here, or by anyone else: the
  OOM killer, ``kill -9``), runs ``python -m asynctask.cli.give_back`` to log it and give back
  the jobs the worker held (``Broker.requeue_process``), rather than leave them until its
  heartbeat expires;
- exits as soon as the worker ended, whichever way.

It runs as ``python -I -S`` on this file alone, importing a few built-in modules and not the
package: it lives as long as the worker, so that all it loads is memory the worker's tree holds
for good (``signal``'s enums alone would add 0.8 MiB to the 8.5 of a bare interpreter: this file
takes the plain numbers of ``_signal``, the module beneath it). The signals a terminal or systemd
sends to the whole group are ignored: the worker tells this process what it needs through the
pipe.
"""

import _signal as signal  # type: ignore[import-not-found]
import os
import select
import sys
import time

#: Written by the worker once it has stopped: nothing is left to guard. Above any signal number,
#: so that it cannot be taken for one the C handler wrote.
ENDED = 0xFF
#: How long a worker past its bound is given to log its threads' stacks before it is killed.
DUMP_WAIT = 0.5
#: Seconds between two looks at whether the worker is still this process's parent: the pipe's end
#: of file alone could be held back by a process a job forked.
PARENT_CHECK_INTERVAL = 1.0
#: How long a killed worker may take to be gone.
DEATH_WAIT = 10.0
IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)


def main(argv: list[str]) -> int:
    """``watchdog_process.py FD PID BOUND IDENTITY WORKER_ARGUMENT...``."""
    pipe, worker, bound, identity, arguments = int(argv[1]), int(argv[2]), float(argv[3]), argv[4], argv[5:]
    for signum in IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    outcome = watch(pipe, worker, bound)
    if outcome is None:
        return 0
    helper = [sys.executable, "-m", "asynctask.cli.give_back", outcome, str(worker), repr(bound), identity]
    child = os.posix_spawn(sys.executable, [*helper, "--", *arguments], os.environ)
    os.waitpid(child, 0)
    return 0


def watch(pipe: int, worker: int, bound: float) -> str | None:
    """Watch ``worker`` until it is gone: None if it ended cleanly, ``"killed"`` if it was killed
    here, past its bound, ``"died"`` if it died otherwise."""
    deadline: float | None = None
    while True:
        wait = PARENT_CHECK_INTERVAL if deadline is None else max(0.0, deadline - time.monotonic())
        received = _receive(pipe, min(wait, PARENT_CHECK_INTERVAL))
        if received is None:
            return "died"
        if ENDED in received:
            return None
        if deadline is None and (signal.SIGTERM in received or signal.SIGINT in received):
            deadline = time.monotonic() + bound
        if os.getppid() != worker:
            return "died"
        if deadline is not None and time.monotonic() >= deadline:
            return None if _kill(pipe, worker) else "killed"


def _kill(pipe: int, worker: int) -> bool:
    """Ask the worker for its threads' stacks, then kill it; True if it ended cleanly meanwhile."""
    os.kill(worker, signal.SIGTTIN)
    if _ended_within(pipe, worker, DUMP_WAIT):
        return True
    os.kill(worker, signal.SIGKILL)
    _ended_within(pipe, worker, DEATH_WAIT)
    return False


def _ended_within(pipe: int, worker: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for the worker to be gone; True if it wrote ``ENDED`` first."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and os.getppid() == worker:
        received = _receive(pipe, min(left, 0.05))
        if received is None:
            # The end of file comes from the kernel as the process goes: its parent changes next.
            time.sleep(0.001)
        elif ENDED in received:
            return True
    return False


def _receive(pipe: int, seconds: float) -> bytes | None:
    """What the worker writes within ``seconds`` (``b""`` if nothing), or None at the pipe's end
    of file: the worker is gone."""
    if not select.select([pipe], [], [], seconds)[0]:
        return b""
    return os.read(pipe, 256) or None


if __name__ == "__main__":
    sys.exit(main(sys.argv))
