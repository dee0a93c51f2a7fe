"""Stopping and resuming one job by jid (``stop_job`` / ``resume_job``).

A stop is a flag beside the job's checkpoint (``Broker.checkpoints``), set first, so that
whoever holds the job next sees it, whatever it is doing meanwhile:

- a job waiting in a queue, the schedule or the retry set is moved to the stopped set at
  once, without running (with the cursor of its last run, if it ran);
- a running job is parked by its worker at its next checkpoint (``worker.resumable``), and
  a worker about to start it parks it instead;
- a job held elsewhere (by its task's feed, its concurrency key's line, or a dead worker
  whose claims are not recovered yet) is parked when a worker takes it.

A second stop changes nothing: the flag is set once and the stored cursor is never written
by a stop. A resume withdraws the flag, then moves the job from the stopped set back to its
queue; the worker that takes it continues from its checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import Engine, select

from asynctask import payload, storable
from asynctask.api.reader import of_client
from asynctask.api.sorted_sets import StoppedSet
from asynctask.brokers.reads import ReadBackend, Scored, SetName, Stored
from asynctask.client import Client
from asynctask.errors import JobNotFound, JobStateError, PayloadError
from asynctask.tracking import transitions
from asynctask.tracking.models import Event, Task
from asynctask.tracking.status import TERMINAL, EventStatus


class StopState(StrEnum):
    #: In the stopped set: it will not run until resumed.
    STOPPED = "stopped"
    #: Running or held elsewhere: it is parked at its next checkpoint or when a worker takes it.
    STOPPING = "stopping"


def _require_possible(jid: str) -> None:
    """No job has a jid that no store could hold: asking the stores for one would only fail."""
    if len(jid) > payload.MAX_JID or storable.first_unstorable(jid, "jid") is not None:
        raise JobNotFound(jid)


def stop_job(engine: Engine, client: Client, jid: str, *, tenant: str | None = None) -> StopState:
    """Stop a resumable job; see the module. Raises JobNotFound (no such job, for this tenant),
    JobStateError ``job_not_resumable`` or ``job_ended``."""
    _require_possible(jid)
    event = _event(engine, jid, tenant)
    if event is not None:
        _require_resumable(client, jid, event.job_name)
    if event is not None and EventStatus(event.status) in TERMINAL:
        raise JobStateError("job_ended", f"job {jid!r} has ended ({event.status}); there is nothing to stop")
    stopped = StoppedSet.over(of_client(client))
    if stopped.find_job(jid) is not None:
        return StopState.STOPPED
    checkpoints = client.broker.checkpoints
    flagged = checkpoints.request_stop(jid)
    try:
        parked = _park_waiting(client, stopped.backend, jid)
    except JobStateError:
        if flagged:
            checkpoints.withdraw_stop(jid)
        raise
    if parked is not None:
        cursor = parked.get("cursor")
        at = "before it ran" if cursor is None else f"at {json.dumps(cursor)}"
        if event is not None:
            _record(client, transitions.status(jid, EventStatus.STOPPED, f"stopped {at}"))
        return StopState.STOPPED
    if checkpoints.is_claimed(jid) or event is not None:
        return StopState.STOPPING
    if stopped.find_job(jid) is not None:
        # Its worker parked it between the two looks.
        return StopState.STOPPED
    if flagged:
        checkpoints.withdraw_stop(jid)
    raise JobNotFound(jid)


def resume_job(engine: Engine, client: Client, jid: str, *, tenant: str | None = None) -> str:
    """Move a stopped job back to its queue, to continue from its checkpoint; return its queue.
    Raises JobNotFound, or JobStateError ``job_not_stopped``."""
    _require_possible(jid)
    event = _event(engine, jid, tenant)
    stopped = StoppedSet.over(of_client(client))
    entry = stopped.find_job(jid)
    if entry is None:
        known = event is not None or client.broker.checkpoints.is_claimed(jid)
        if not known and next(_waiting(stopped.backend, jid), None) is None:
            raise JobNotFound(jid)
        raise JobStateError("job_not_stopped", f"job {jid!r} is not stopped; only a stopped job resumes")
    client.broker.checkpoints.withdraw_stop(jid)
    cursor = entry.get("cursor")
    at = "from the start" if cursor is None else f"at {json.dumps(cursor)}"
    if event is not None:
        _record(client, transitions.status(jid, EventStatus.ENQUEUE, f"resumed {at}"))
    if not entry.add_to_queue():
        raise JobStateError("job_not_stopped", f"job {jid!r} was resumed meanwhile")
    queue = entry.get("queue")
    return queue if isinstance(queue, str) and queue else "default"


def drop_stopped(client: Client, task_id: str) -> int:
    """Delete a cancelled task's stopped jobs, which never run again, and their checkpoints;
    return how many. Reads the stopped set once (a scan for the task id), then deletes."""
    stopped = StoppedSet.over(of_client(client))
    found = [entry for entry in stopped.scan(task_id) if entry.get("task") == task_id]
    dropped = 0
    for entry in found:
        if entry.delete():
            dropped += 1
            if entry.jid is not None:
                client.broker.checkpoints.clear(entry.jid)
    return dropped


def _event(engine: Engine, jid: str, tenant: str | None) -> Any:
    """The job's tracking row with its task's tenant, or None; JobNotFound when a tenant is
    given and the job is not one of its tasks' (another tenant's job is as absent as none)."""
    query = (
        select(Event.status, Event.job_name, Task.tenant)
        .select_from(Event)
        .outerjoin(Task, Task.id == Event.task_id)
        .where(Event.job_id == jid)
    )
    with engine.connect() as connection:
        row = connection.execute(query).first()
    if tenant is not None and (row is None or row.tenant != tenant):
        raise JobNotFound(jid)
    return row


def _require_resumable(client: Client, jid: str, name: object) -> None:
    """Refuse to stop a job this process knows is not a generator (one it does not know may
    be: its worker decides)."""
    if isinstance(name, str) and name in client.registry and not client.registry.get(name).resumable:
        raise JobStateError(
            "job_not_resumable", f"job {jid!r} ({name}) is not a generator: it cannot stop midway"
        )


def _park_waiting(client: Client, backend: ReadBackend, jid: str) -> payload.JobDict | None:
    """Move the job from the schedule, the retry set or a queue to the stopped set, with its
    stored cursor; the job as parked, or None if it waits in none of them."""
    now = payload.now()
    for name, found, job in _waiting(backend, jid):
        parked = _parked(client, job, jid)
        encoded = payload.dumps_storable(parked)
        if isinstance(found, Scored):
            moved = backend.set_park(cast(SetName, name), found, encoded, now)
        else:
            moved = backend.queue_park(name, found, encoded, now)
        if moved:
            return parked
    return None


def _waiting(backend: ReadBackend, jid: str) -> Iterator[tuple[str, Stored | Scored, payload.JobDict]]:
    """Where the job waits (the set's or queue's name, the job as stored there, decoded)."""
    for name in ("schedule", "retry"):
        for scored in backend.set_candidates(name, jid):
            job = _decoded(scored.raw, jid)
            if job is not None:
                yield name, scored, job
    for queue in backend.queue_names():
        for stored in backend.queue_candidates(queue, jid):
            job = _decoded(stored.raw, jid)
            if job is not None:
                yield queue, stored, job


def _decoded(raw: bytes, jid: str) -> payload.JobDict | None:
    try:
        job = payload.loads(raw)
    except PayloadError:
        return None
    return job if job.get("jid") == jid else None


def _parked(client: Client, job: payload.JobDict, jid: str) -> payload.JobDict:
    """The job as the stopped set keeps it: with the cursor of its last run, if it ran."""
    _require_resumable(client, jid, job.get("class"))
    stored = client.broker.checkpoints.load(jid).cursor
    return {**job, "cursor": json.loads(stored)} if stored is not None else job


def _record(client: Client, transition: transitions.Transition) -> None:
    client.broker.tracking.write_transitions([transition.encode()])
