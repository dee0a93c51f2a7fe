"""What ``asynctask worker``'s supervisor and its worker child agree on.

Kept apart from the runtime so that the supervisor, a long-lived parent of every worker
process, imports none of it (no Redis client, no SQLAlchemy, no job code): its memory is
that of a bare interpreter.
"""

from __future__ import annotations

import os
import socket

#: Set in the worker child's environment: the identity the child runs under.
IDENTITY_ENV = "ASYNCTASK_WORKER_IDENTITY"
#: The child's exit code when it stopped to be replaced (``max_jobs`` or ``max_memory_mb``):
#: EX_TEMPFAIL.
RECYCLE_EXIT = 75
#: Seconds interrupted jobs get to unwind after the shutdown timeout, before their jobs are
#: pushed back.
UNWIND_TIMEOUT = 3.0


def in_worker_child() -> bool:
    """Whether this process is a worker child started by a supervisor."""
    return IDENTITY_ENV in os.environ


def new_identity(pid: int) -> str:
    """A process identity as Sidekiq writes it: ``hostname:pid:random``."""
    hostname = os.environ.get("DYNO") or socket.gethostname()
    return f"{hostname}:{pid}:{os.urandom(6).hex()}"
