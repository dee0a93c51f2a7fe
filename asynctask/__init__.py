"""AsyncTask: background jobs on Sidekiq's Redis format, whose progress people can see."""

__version__ = "0.1.0"

from asynctask.client import Client, configure, default_client
from asynctask.context import JobContext, current_job
from asynctask.errors import (
    AsyncTaskError,
    JobArgumentsError,
    JobNotRegistered,
    PayloadError,
    Shutdown,
)
from asynctask.job import JobDefinition, JobOptions, job
from asynctask.middleware import Chain, client_chain, server_chain
from asynctask.registry import Registry, default_registry
from asynctask.settings import QueueSpec, Settings

__all__ = [
    # Errors
    "AsyncTaskError",
    # Middleware
    "Chain",
    # Jobs and enqueueing
    "Client",
    "JobArgumentsError",
    "JobContext",
    "JobDefinition",
    "JobNotRegistered",
    "JobOptions",
    "PayloadError",
    "QueueSpec",
    "Registry",
    # Configuration
    "Settings",
    "Shutdown",
    "__version__",
    "client_chain",
    "configure",
    "current_job",
    "default_client",
    "default_registry",
    "job",
    "server_chain",
]
