"""AsyncTask: background jobs on Sidekiq's Redis format, whose progress people can see."""

__version__ = "0.1.0"

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

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
    TaskWaiting,
)
from asynctask.registry import Registry, default_registry

#: The functions of ``tasks.service``, each with its coroutine twin ``a<name>`` in
#: ``tasks.async_service``.
_SERVICE_FUNCTIONS = (
    "cancel_task",
    "chain",
    "create_task",
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

# The rest is imported on first use: the client brings the Redis client library, tracking
# SQLAlchemy, job definitions their checks, and a process that needs none of them (the CLI's
# help, a command that fails on its arguments) starts sooner and stays smaller without them.
_LAZY = {
    "JobDefinition": "asynctask.job",
    "JobOptions": "asynctask.job_spec",
    **{name: "asynctask.periodic.schedule" for name in ("Schedule", "Schedules", "default_schedules")},
    **{name: "asynctask.context" for name in ("JobContext", "current_job")},
    **{name: "asynctask.items" for name in ("ItemsRun", "each")},
    **{name: "asynctask.middleware" for name in ("Chain", "client_chain", "server_chain")},
    **{name: "asynctask.settings" for name in ("QueueSpec", "Settings")},
    **{name: "asynctask.tasks.options" for name in ("TaskOptionError", "TaskOptions")},
    **{name: "asynctask.tasks.steps" for name in ("TaskStep", "step")},
    **{name: "asynctask.tracking.status" for name in ("EventStatus", "TaskStatus")},
    **{
        name: "asynctask.tracking.views"
        for name in (
            "EventView",
            "FailedItemView",
            "ItemCounts",
            "MessageView",
            "Page",
            "TaskView",
            "TaskWarning",
        )
    },
    **{name: "asynctask.client" for name in ("Client", "configure", "default_client")},
    **{name: "asynctask.async_client" for name in ("AsyncClient", "default_async_client")},
    "AsyncTracking": "asynctask.tasks.async_service",
    "default_async_tracking": "asynctask.tasks.async_service",
    **{f"a{name}": "asynctask.tasks.async_service" for name in _SERVICE_FUNCTIONS},
    **{name: "asynctask.tasks.service" for name in ("Tracking", "default_tracking", *_SERVICE_FUNCTIONS)},
}

#: The decorators named like a submodule of this package (``asynctask.job``, ``asynctask.periodic``).
_DECORATORS = {"job": "asynctask.job", "periodic": "asynctask.periodic.schedule"}


def _decorator(name: str) -> property:
    """The decorator ``name`` of ``_DECORATORS``, loaded on first use; setting the attribute
    (as the import system does when the submodule of that name loads) changes nothing."""

    def get(_package: ModuleType) -> Any:
        return getattr(importlib.import_module(_DECORATORS[name]), name)

    def keep(_package: ModuleType, _submodule: ModuleType) -> None:
        pass

    return property(get, keep)


class _Package(ModuleType):
    """This package, whose ``job`` and ``periodic`` stay the decorators: importing a submodule
    sets the package's attribute of its name to the submodule, which every ``from asynctask.job
    import ...`` still finds in ``sys.modules``."""

    job = _decorator("job")
    periodic = _decorator("periodic")


sys.modules[__name__].__class__ = _Package

if TYPE_CHECKING:
    from asynctask.async_client import AsyncClient, default_async_client
    from asynctask.client import Client, configure, default_client
    from asynctask.context import JobContext, current_job
    from asynctask.items import ItemsRun, each
    from asynctask.job import JobDefinition, job
    from asynctask.job_spec import JobOptions
    from asynctask.middleware import Chain, client_chain, server_chain
    from asynctask.periodic.schedule import Schedule, Schedules, default_schedules, periodic
    from asynctask.settings import QueueSpec, Settings
    from asynctask.tasks.async_service import (
        AsyncTracking,
        acancel_task,
        achain,
        acreate_task,
        aget_task,
        alist_events,
        alist_failed_items,
        alist_tasks,
        apause_task,
        aresume_job,
        aresume_task,
        aretry_task,
        astop_job,
        aupdate_task,
        default_async_tracking,
    )
    from asynctask.tasks.options import TaskOptionError, TaskOptions
    from asynctask.tasks.service import (
        Tracking,
        cancel_task,
        chain,
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
    from asynctask.tasks.steps import TaskStep, step
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
        return sorted({*globals(), *_LAZY, *_DECORATORS})


__all__ = [
    "AsyncClient",
    "AsyncTaskError",
    "AsyncTracking",
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
    "TaskOptionError",
    "TaskOptions",
    "TaskStateError",
    "TaskStatus",
    "TaskStep",
    "TaskView",
    "TaskWaiting",
    "TaskWarning",
    "Tracking",
    "__version__",
    "acancel_task",
    "achain",
    "acreate_task",
    "aget_task",
    "alist_events",
    "alist_failed_items",
    "alist_tasks",
    "apause_task",
    "aresume_job",
    "aresume_task",
    "aretry_task",
    "astop_job",
    "aupdate_task",
    "cancel_task",
    "chain",
    "client_chain",
    "configure",
    "create_task",
    "current_job",
    "default_async_client",
    "default_async_tracking",
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
    "step",
    "stop_job",
    "update_task",
]
