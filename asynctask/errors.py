"""The exceptions AsyncTask raises, and the ones job code raises to steer the runtime."""

from __future__ import annotations


class AsyncTaskError(Exception):
    """Base class of every error AsyncTask raises on its own."""


class JobNotRegistered(AsyncTaskError, LookupError):
    """A payload names a job class that no loaded module registered.

    The runtime never imports code named by a payload, so such a job goes to the dead set.
    """

    def __init__(self, name: str) -> None:
        super().__init__(
            f"job class {name!r} is not registered in this process "
            "(register it with @asynctask.job and load its module with -r)"
        )
        self.name = name


class PayloadError(AsyncTaskError, ValueError):
    """A job payload read from Redis is not a valid Sidekiq job.

    ``job`` holds the decoded object when the payload was JSON but not a well-formed job.
    """

    def __init__(self, message: str, job: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.job = job


class JobArgumentsError(AsyncTaskError, TypeError):
    """A job's args do not fit its function's signature; retrying cannot help."""


class Shutdown(BaseException):
    """Raised inside a busy worker thread when a hard shutdown interrupts its job.

    A BaseException so that job code catching ``Exception`` does not swallow it. The job
    itself has already been pushed back to its queue when this is raised.
    """
