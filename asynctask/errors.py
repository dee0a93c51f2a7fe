"""The exceptions AsyncTask raises, and the ones job code raises to steer the runtime."""

from __future__ import annotations

import sys


def error_class_name(exc: BaseException) -> str:
    """The exception's class as Sidekiq's ``error_class`` shows it: module-qualified unless builtin,
    and AsyncTask's own exceptions by the path users import them from (``asynctask.JobFailed``,
    not the module that happens to define it)."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    if cls.__module__.startswith("asynctask.") and _exported(cls):
        return f"asynctask.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _exported(cls: type) -> bool:
    # The package imports this module first thing, so it is loaded by the time anything is
    # raised; vars() rather than getattr() keeps the package's lazy imports out of this.
    package = sys.modules.get("asynctask")
    return package is not None and vars(package).get(cls.__name__) is cls


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


class InvalidString(AsyncTaskError, ValueError):
    """Data handed to AsyncTask (items, args, meta) holds a string no store can keep: U+0000 or a
    lone surrogate. ``field`` names the argument, ``item`` the item's index in it, if any."""

    def __init__(self, message: str, *, field: str, item: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.item = item


class InvalidName(AsyncTaskError, ValueError):
    """A queue name, jid or job class name that no broker can hold: empty, too long, or with
    NUL or another control character. ``field`` names which."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class InvalidSetting(AsyncTaskError, ValueError):
    """A setting AsyncTask cannot use, such as a URL of the wrong kind. ``setting`` names it as
    it was given: the environment variable, the command-line option or the ``Settings`` field."""

    def __init__(self, message: str, *, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


class JobArgumentsError(AsyncTaskError, TypeError):
    """A job's args do not fit its function's signature; retrying cannot help."""


class Shutdown(BaseException):
    """Raised inside a busy worker thread when a hard shutdown interrupts its job.

    A BaseException so that job code catching ``Exception`` does not swallow it. The job
    itself has already been pushed back to its queue when this is raised.
    """


class JobInterrupted(BaseException):
    """Raised by the runtime between two iterations of a resumable job to end its run early,
    its checkpoint stored: ``reason`` is "stop" (``stop_job``: the job is parked in the
    stopped set), "cancel" (its task was cancelled), "pause" (its fed task was paused: it
    goes back to the feed's held jobs) or "shutdown" (the worker is stopping: it goes back to
    its queue). A run that continues it starts from ``cursor``.

    A BaseException so that job code catching ``Exception`` does not swallow it.
    """

    def __init__(self, reason: str, cursor: str | None) -> None:
        super().__init__(reason, cursor)
        self.reason = reason
        #: The checkpoint the job stopped at, as JSON text; None before its first.
        self.cursor = cursor


#: The message of the ``asyncio.CancelledError`` a running async job gets when its task was
#: cancelled (any other cancellation from the runtime is the worker's shutdown).
TASK_CANCELLED = "asynctask: task cancelled"


class JobFailed(Exception):
    """Raised by job code for a business failure: the job did its work and the answer is no.

    Example: a seller who does not qualify for a campaign. The job ends there: it is not
    retried and does not go to the dead set; a tracked job's event becomes ``failed`` with
    this message.
    """


class TaskNotFound(AsyncTaskError, LookupError):
    """No task has this id (for this tenant, when one is given)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task {task_id!r}")
        self.task_id = task_id


class JobsNotSent(AsyncTaskError):
    """Another runtime refused some of a task's jobs: the task exists, and the events of the
    jobs it did not take ended ``error`` "not sent: <reason>"."""

    def __init__(self, task_id: str, sent: int, total: int, reason: str) -> None:
        super().__init__(f"task {task_id}: {total - sent} of {total} job(s) not sent: {reason}")
        self.task_id = task_id
        self.sent = sent
        self.total = total
        self.reason = reason


class JobNotFound(AsyncTaskError, LookupError):
    """No job has this jid (for this tenant, when one is given), or it has left every queue."""

    def __init__(self, jid: str) -> None:
        super().__init__(f"no job {jid!r}")
        self.jid = jid


class JobStateError(AsyncTaskError):
    """The job cannot do what was asked in its current state. ``code`` says which state:
    ``job_not_stopped`` (a resume of a job that is not in the stopped set),
    ``job_not_resumable`` (a stop of a job that is not a generator), ``job_ended`` (a stop of
    a job that has finished, failed or been cancelled)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class TaskStateError(AsyncTaskError):
    """The task cannot do what was asked in its current state (retrying a cancelled task)."""


class TaskWaiting(TaskStateError):
    """The task waits for its parents: its feed is paused until they have ended, and only then
    may it be paused or resumed."""


class TaskNotFed(TaskStateError):
    """The task has no feed to change: it was created without ``parallel``."""
