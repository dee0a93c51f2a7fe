"""What a job is: its function, name, options and the checks of its arguments and items.

A worker runs a ``JobSpec`` that its registry holds; a client reads one's options to make a
push. ``asynctask.job.JobDefinition`` adds the ``perform_*`` that push it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec

from asynctask import payload
from asynctask.errors import JobArgumentsError
from asynctask.flow.options import OPTION_NAMES as FLOW_OPTION_NAMES
from asynctask.flow.options import FlowOptions

if TYPE_CHECKING:
    import jsonschema_rs

P = ParamSpec("P")

#: ``retry_in(count, exc, job)``: seconds until the next try, None for Sidekiq's default,
#: "kill" to send the job to the dead set now, or "discard" to drop it.
RetryIn = Callable[[int, BaseException, payload.JobDict], "float | Literal['kill', 'discard'] | None"]
#: ``on_retries_exhausted(job, exc)``: called once when a job will not be tried again.
RetriesExhausted = Callable[[payload.JobDict, BaseException], None]

_OPTION_NAMES = ("queue", "retry", "backtrace", "dead", "retry_queue", "tags")


@dataclass(frozen=True)
class JobOptions:
    """The options written into each payload; unset ones are left out, as Sidekiq leaves them."""

    queue: str = "default"
    retry: bool | int = True
    backtrace: bool | int = False
    dead: bool = True
    retry_queue: str | None = None
    tags: tuple[str, ...] = ()
    #: Further payload keys (JSON-native), e.g. ``track=True``.
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: Concurrency keys, rate limits and uniqueness: resolved per push by the client.
    flow: FlowOptions = field(default_factory=FlowOptions)

    def merged(self, overrides: Mapping[str, Any]) -> JobOptions:
        known = {k: v for k, v in overrides.items() if k in _OPTION_NAMES}
        extra = {k: v for k, v in overrides.items() if k not in _OPTION_NAMES and k not in FLOW_OPTION_NAMES}
        if "tags" in known:
            known["tags"] = tuple(known["tags"])
        flow = self.flow.merged(overrides)
        return replace(self, **known, extra={**self.extra, **extra}, flow=flow).validated()

    def validated(self) -> JobOptions:
        if not isinstance(self.queue, str) or not self.queue:
            raise ValueError("queue must be a non-empty string")
        payload.check_names(self.payload_head())
        if not isinstance(self.retry, bool | int) or (self.retry is not True and self.retry < 0):
            raise ValueError("retry must be True, False or a non-negative int")
        if not isinstance(self.backtrace, bool | int):
            raise ValueError("backtrace must be a bool or a line count")
        payload.check_args([dict(self.extra)])
        self.flow.validated()
        return self

    def payload_head(self) -> payload.JobDict:
        """The leading payload keys, in Sidekiq's order: retry, queue, then the options set."""
        head: payload.JobDict = {"retry": self.retry, "queue": self.queue}
        if self.backtrace:
            head["backtrace"] = self.backtrace
        if not self.dead:
            head["dead"] = False
        if self.retry_queue:
            head["retry_queue"] = self.retry_queue
        if self.tags:
            head["tags"] = list(self.tags)
        head.update(self.extra)
        return head


def _is_or_wraps(func: Callable[..., Any], kind: Callable[[Any], bool]) -> bool:
    """Whether ``func``, or the function it wraps (``functools.wraps``), is of ``kind``."""
    return kind(func) or kind(inspect.unwrap(func))


def _positional_counts(signature: inspect.Signature) -> tuple[int, float] | None:
    """The fewest and most positional arguments ``signature.bind(*args)`` takes, when their
    count alone decides it (no keyword-only parameter without a default): every push and every
    run checks a job's arguments, and binding costs microseconds where comparing costs none."""
    least, most = 0, 0.0
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            most += 1
            if parameter.default is parameter.empty:
                least += 1
        elif parameter.kind == parameter.VAR_POSITIONAL:
            most = math.inf
        elif parameter.kind == parameter.KEYWORD_ONLY and parameter.default is parameter.empty:
            return None
    return least, most


class JobSpec(Generic[P]):
    """A job as a registry holds it. Calling it runs the function inline.

    ``api``: whether the HTTP API may create tasks of it (nothing else can be named there).
    ``item_schema``: a JSON Schema (2020-12) each item of a task must match before anything
    of the task is written; checked when the job is defined.
    """

    def __init__(
        self,
        func: Callable[P, Any],
        name: str,
        options: JobOptions,
        *,
        api: bool = False,
        item_schema: Mapping[str, Any] | None = None,
    ) -> None:
        self.func = func
        payload.check_names({"class": name})
        self.name = name
        self.options = options
        self.api = api
        self.item_schema = dict(item_schema) if item_schema is not None else None
        self.item_validator = _compile_schema(name, self.item_schema)
        async_generator = _is_or_wraps(func, inspect.isasyncgenfunction)
        #: An ``async def`` job (an async generator too): awaited on the worker's event loop,
        #: not run on a thread.
        self.is_async = async_generator or _is_or_wraps(func, inspect.iscoroutinefunction)
        self.signature = inspect.signature(func)
        #: A generator function is resumable: each value it yields is a checkpoint, and a run
        #: that continues an earlier one is called with ``cursor=`` the last (see
        #: ``worker.resumable``); the first run gets ``cursor=None``. So is an async generator.
        self.resumable = async_generator or inspect.isgeneratorfunction(func)
        self._counts = None if self.resumable else _positional_counts(self.signature)
        if self.resumable:
            cursor = self.signature.parameters.get("cursor")
            if cursor is None or cursor.kind not in (cursor.POSITIONAL_OR_KEYWORD, cursor.KEYWORD_ONLY):
                raise ValueError(
                    f"job {name!r}: a generator job is resumable and takes its checkpoint as a "
                    f"'cursor' keyword argument (def {func.__name__}(..., cursor=None))"
                )
        if api:
            try:
                self._bind([[]])
            except TypeError:
                raise ValueError(f"job {name!r}: an API job takes one argument, its chunk of items") from None
        self.retry_in_handler: RetryIn | None = None
        self.retries_exhausted_handler: RetriesExhausted | None = None
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.name} queue={self.options.queue}>"

    def check_args(self, args: Sequence[Any]) -> None:
        """Raise JobArgumentsError if the function cannot be called with ``args``."""
        counts = self._counts
        if counts is not None and counts[0] <= len(args) <= counts[1]:
            return
        try:
            self._bind(args)
        except TypeError as exc:
            raise JobArgumentsError(f"{self.name} cannot take {len(args)} argument(s): {exc}") from None

    def _bind(self, args: Sequence[Any]) -> None:
        if self.resumable:
            self.signature.bind(*args, cursor=None)
        else:
            self.signature.bind(*args)

    def retry_in(self, handler: RetryIn) -> RetryIn:
        """Decorator: a custom retry delay, as Sidekiq's ``sidekiq_retry_in``."""
        self.retry_in_handler = handler
        return handler

    def on_retries_exhausted(self, handler: RetriesExhausted) -> RetriesExhausted:
        """Decorator: called when retries run out, as Sidekiq's ``sidekiq_retries_exhausted``."""
        self.retries_exhausted_handler = handler
        return handler


def _compile_schema(name: str, schema: dict[str, Any] | None) -> jsonschema_rs.Validator | None:
    if schema is None:
        return None
    # Only jobs with an item schema need the validator library: others never load it.
    import jsonschema_rs

    try:
        jsonschema_rs.meta.validate(schema)
        return jsonschema_rs.validator_for(schema)
    except (jsonschema_rs.ValidationError, ValueError) as exc:
        raise ValueError(f"job {name!r}: item_schema is not a valid JSON Schema: {exc}") from None
