"""AsyncTask: background jobs on Sidekiq's Redis format, whose progress people can see."""

__version__ = "0.1.0"

from asynctask.client import Client, configure, default_client
from asynctask.context import JobContext, current_job
from asynctask.errors import (
    AsyncTaskError,
    JobArgumentsError,
    JobFailed,
    JobNotRegistered,
    PayloadError,
    Shutdown,
    TaskNotFound,
    TaskStateError,
)
from asynctask.job import JobDefinition, JobOptions, job
from asynctask.middleware import Chain, client_chain, server_chain
from asynctask.registry import Registry, default_registry
from asynctask.settings import QueueSpec, Settings
from asynctask.tracking.service import (
    Tracking,
    cancel_task,
    create_task,
    default_tracking,
    get_task,
    list_events,
    list_tasks,
    retry_task,
)
from asynctask.tracking.status import EventStatus, TaskStatus
from asynctask.tracking.views import EventView, MessageView, Page, TaskView

__all__ = [
    "AsyncTaskError",
    "Chain",
    "Client",
    "EventStatus",
    "EventView",
    "JobArgumentsError",
    "JobContext",
    "JobDefinition",
    "JobFailed",
    "JobNotRegistered",
    "JobOptions",
    "MessageView",
    "Page",
    "PayloadError",
    "QueueSpec",
    "Registry",
    "Settings",
    "Shutdown",
    "TaskNotFound",
    "TaskStateError",
    "TaskStatus",
    "TaskView",
    "Tracking",
    "__version__",
    "cancel_task",
    "client_chain",
    "configure",
    "create_task",
    "current_job",
    "default_client",
    "default_registry",
    "default_tracking",
    "get_task",
    "job",
    "list_events",
    "list_tasks",
    "retry_task",
    "server_chain",
]
