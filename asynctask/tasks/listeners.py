"""Whether a live worker listens to a queue.

A job pushed to a queue that no worker process takes from waits there, silently, until one
starts: a queue named wrong, or a worker started without ``-q`` for it. Whoever submits work
is told (a warning, not an error: workers may start later). It costs one read of the live
processes, made once per ``create_task`` or ``asynctask enqueue``, never per job: the library's
``perform_async`` and ``perform_bulk`` do not look.
"""

from __future__ import annotations

import logging
from weakref import WeakKeyDictionary

from asynctask.api.processes import ProcessSet
from asynctask.api.reader import of_client
from asynctask.client import Client
from asynctask.tracking.views import TaskWarning

logger = logging.getLogger("asynctask")

#: The warning's code, as ``POST /api/tasks`` answers it.
NO_WORKER = "no_worker"


#: Each client's reader of the live processes, over the client's own broker connections,
#: made on its first task (an API process asks on every submission).
_process_sets: WeakKeyDictionary[Client, ProcessSet] = WeakKeyDictionary()


def listened_queues(client: Client) -> frozenset[str] | None:
    """The queues a live worker process of the client's broker takes jobs from; None when the
    broker did not answer (the caller then has nothing to say, rather than a false alarm)."""
    try:
        processes = _process_sets.get(client)
        if processes is None:
            processes = _process_sets.setdefault(client, ProcessSet.over(of_client(client)))
        return processes.listened_queues()
    except client.broker.errors as exc:
        logger.debug("could not read the live worker processes: %s", exc)
        return None


def no_worker(client: Client, queue: str, waiting: str = "the jobs wait") -> TaskWarning | None:
    """A warning when no live worker process listens to ``queue``; None when one does or the
    broker did not say. ``waiting`` starts the message's second half."""
    listened = listened_queues(client)
    if listened is None or queue in listened:
        return None
    return TaskWarning(NO_WORKER, f"no live worker listens to queue {queue!r}; {waiting} until one does")
