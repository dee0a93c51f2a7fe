"""Stopping the runtime workers a test started, each in a session (process group) of its own."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable


def stop_groups(procs: Iterable[subprocess.Popen[bytes]], grace: float = 20.0) -> None:
    """TERM every process group still running, all at once, then KILL those that outlive ``grace``
    seconds: a runtime's main process and the processes it forked go together."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
