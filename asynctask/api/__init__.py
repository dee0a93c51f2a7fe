"""The read model over the broker's data, like Ruby's ``Sidekiq::API``.

Sees and acts on queues, the scheduled, retry, dead and stopped sets, live processes and what they
run, the periodic schedules, and the concurrency keys whose jobs hold or wait for slots, on
either broker: Redis (jobs of Ruby and Python processes alike) or SQL. Nothing here is
imported by the worker runtime. Each class takes a Redis ``(connection, keys)``, or
``settings=`` (the broker is the settings' broker URL), or nothing for the default client's.
"""

from asynctask.api.busy_keys import BusyKeys, busy_keys
from asynctask.api.periodic import PeriodicEntry, PeriodicSet
from asynctask.api.processes import Process, ProcessSet
from asynctask.api.queues import Queue
from asynctask.api.reader import Context
from asynctask.api.records import JobRecord
from asynctask.api.sorted_sets import DeadSet, JobSet, RetrySet, ScheduledSet, SortedEntry, StoppedSet
from asynctask.api.stats import History, Stats
from asynctask.api.work import Work, WorkSet
from asynctask.brokers.reads import Backlog, BusyKey, Snapshot

__all__ = [
    "Backlog",
    "BusyKey",
    "BusyKeys",
    "Context",
    "DeadSet",
    "History",
    "JobRecord",
    "JobSet",
    "PeriodicEntry",
    "PeriodicSet",
    "Process",
    "ProcessSet",
    "Queue",
    "RetrySet",
    "ScheduledSet",
    "Snapshot",
    "SortedEntry",
    "Stats",
    "StoppedSet",
    "Work",
    "WorkSet",
    "busy_keys",
]
