"""AsyncTask: background jobs on Sidekiq's Redis format, whose progress people can see."""

__version__ = "0.1.0"

import importlib
from typing import TYPE_CHECKING, Any

from asynctask.context import JobContext, current_job
from asynctask.errors import (
    AsyncTaskError,
    InvalidName,
    InvalidSetting,
    InvalidString,
    JobArgumentsError,
    JobFailed,
    JobInterrupted,
    JobNotFound,
    JobNotRegistered,
    JobsNotSent,
    JobStateError,
    PayloadError,
    Shutdown,
    TaskNotFed,
    TaskNotFound,
    TaskStateError,
)
from asynctask.items import ItemsRun, each
from asynctask.job import JobDefinition, JobOptions, job
from asynctask.middleware import Chain, client_chain, server_chain
from asynctask.periodic import Schedule, Schedules, default_schedules, periodic
from asynctask.registry import Registry, default_registry
from asynctask.settings import QueueSpec, Settings
from asynctask.tracking.status import EventStatus, TaskStatus
from asynctask.tracking.views import (
    EventView,
    FailedItemView,
    ItemCounts,
    MessageView,
    Page,
    TaskView,
    TaskWarning,
)

#: Names imported on first use, with their module: they need SQLAlchemy (the tracking
#: database), which a client or a Redis worker with tracking off never loads otherwise.
# Loaded on first use: the client brings the Redis client library, tracking SQLAlchemy, and
# a process that needs neither (the worker supervisor, the CLI's help) stays small.
_LAZY = {
    **{name: "asynctask.client" for name in ("Client", "configure", "default_client")},
    **{
        name: "asynctask.tasks.service"
        for name in (
            "Tracking",
            "cancel_task",
            "create_task",
            "default_tracking",
            "each",
            "get_task",
            "list_events",
            "list_failed_items",
            "list_tasks",
            "pause_task",
            "resume_job",
            "resume_task",
            "retry_task",
            "stop_job",
            "update_task",
        )
    },
}

if TYPE_CHECKING:
    from asynctask.client import Client, configure, default_client
    from asynctask.tasks.service import (
        Tracking,
        cancel_task,
        create_task,
        default_tracking,
        get_task,
        list_events,
        list_failed_items,
        list_tasks,
        pause_task,
        resume_job,
        resume_task,
        retry_task,
        stop_job,
        update_task,
    )
else:
    # Out of type checkers' sight: they would give any misspelt name of this package the type
    # of its result.
    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY})


__all__ = [
    "AsyncTaskError",
    "Chain",
    "Client",
    "EventStatus",
    "EventView",
    "FailedItemView",
    "InvalidName",
    "InvalidSetting",
    "InvalidString",
    "ItemCounts",
    "ItemsRun",
    "JobArgumentsError",
    "JobContext",
    "JobDefinition",
    "JobFailed",
    "JobInterrupted",
    "JobNotFound",
    "JobNotRegistered",
    "JobOptions",
    "JobStateError",
    "JobsNotSent",
    "MessageView",
    "Page",
    "PayloadError",
    "QueueSpec",
    "Registry",
    "Schedule",
    "Schedules",
    "Settings",
    "Shutdown",
    "TaskNotFed",
    "TaskNotFound",
    "TaskStateError",
    "TaskStatus",
    "TaskView",
    "TaskWarning",
    "Tracking",
    "__version__",
    "cancel_task",
    "client_chain",
    "configure",
    "create_task",
    "current_job",
    "default_client",
    "default_registry",
    "default_schedules",
    "default_tracking",
    "each",
    "get_task",
    "job",
    "list_events",
    "list_failed_items",
    "list_tasks",
    "pause_task",
    "periodic",
    "resume_job",
    "resume_task",
    "retry_task",
    "server_chain",
    "stop_job",
    "update_task",
]
