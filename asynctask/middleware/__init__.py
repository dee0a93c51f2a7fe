"""Client and server middleware chains.

Client middleware: ``mw(job, queue, call_next) -> job | None``; it runs before a job is pushed
(also when the poller moves a scheduled or retried job to its queue). Returning None drops the
push. Server middleware: ``mw(definition, job, queue, call_next) -> None``; it wraps the job's
execution inside the worker. Not calling ``call_next`` skips the job (it counts as done). An
exception escaping a server middleware is handled like one raised by the job: the job is
retried or moved to the dead set, never lost.

The default chains start with the tracking middleware (``asynctask.middleware.tracking``),
which does nothing for jobs that are not tracked.
"""

from __future__ import annotations

from typing import Any

from asynctask.middleware.chain import Chain
from asynctask.middleware.tracking import TrackingClientMiddleware, TrackingServerMiddleware
from asynctask.payload import JobDict

#: Used by every Client created without an explicit chain (and so by ``perform_async``).
client_chain: Chain[JobDict] = Chain([TrackingClientMiddleware()])
#: Used by every worker created without an explicit chain.
server_chain: Chain[Any] = Chain([TrackingServerMiddleware()])

__all__ = ["Chain", "TrackingClientMiddleware", "TrackingServerMiddleware", "client_chain", "server_chain"]
