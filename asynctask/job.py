"""``@asynctask.job``: a function becomes a job that can be enqueued by name.

The name is the Sidekiq ``class`` string (by default the function's name; set it to a Ruby
class name such as ``"SleepWorker"`` to share a queue with Ruby code). Options mirror
``sidekiq_options`` and are written into every payload, as Sidekiq does, so Ruby tooling
sees them and middleware can read them (``job.get("track")``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar, cast, overload

from asynctask import payload
from asynctask.errors import JobArgumentsError
from asynctask.flow.options import OPTION_NAMES as FLOW_OPTION_NAMES
from asynctask.flow.options import FlowOptions, KeySpec
from asynctask.registry import Registry, default_registry

if TYPE_CHECKING:
    import jsonschema_rs

    from asynctask.async_client import AsyncClient
    from asynctask.client import Client

P = ParamSpec("P")
R = TypeVar("R")

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


class JobDefinition(Generic[P]):
    """A registered job. Calling it runs the function inline; ``perform_*`` enqueue it.

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

    def set(self, *, client: Client | AsyncClient | None = None, **options: Any) -> JobSetter:
        """Per-call options (queue, retry, ... or extra payload keys), as Sidekiq's ``set``;
        ``client``: a ``Client`` for ``perform_*``, an ``AsyncClient`` for ``aperform_*``."""
        # Only real options make this Ruby's Setter (args before class); a client alone does not,
        # nor does it change the options (merging and checking them costs microseconds).
        if not options:
            return JobSetter(self, self.options, client)
        return JobSetter(self, self.options.merged(options), client, via_set=True)

    def perform_async(self, *args: Any) -> str:
        return JobSetter(self, self.options, None).perform_async(*args)

    def perform_in(self, interval: float, *args: Any) -> str:
        return JobSetter(self, self.options, None).perform_in(interval, *args)

    def perform_at(self, when: float | datetime, *args: Any) -> str:
        return JobSetter(self, self.options, None).perform_at(when, *args)

    def perform_bulk(self, args_list: Iterable[Sequence[Any]], batch_size: int = 1000) -> list[str]:
        return JobSetter(self, self.options, None).perform_bulk(args_list, batch_size)

    # The ``aperform_*`` return their setter's coroutine rather than await it in one of their
    # own: a coroutine fewer for each push a thousand coroutines have under way.

    def aperform_async(self, *args: Any) -> Coroutine[Any, Any, str]:
        """``perform_async`` from an event loop (``asynctask.async_client``), to be awaited."""
        return JobSetter(self, self.options, None)._apush(list(args), None)

    def aperform_in(self, interval: float, *args: Any) -> Coroutine[Any, Any, str]:
        return JobSetter(self, self.options, None)._apush(list(args), _after(interval))

    def aperform_at(self, when: float | datetime, *args: Any) -> Coroutine[Any, Any, str]:
        return JobSetter(self, self.options, None)._apush(list(args), _epoch(when))

    def aperform_bulk(
        self, args_list: Iterable[Sequence[Any]], batch_size: int = 1000
    ) -> Coroutine[Any, Any, list[str]]:
        return JobSetter(self, self.options, None).aperform_bulk(args_list, batch_size)


class JobSetter:
    """A job with per-call options; what ``JobDefinition.set`` returns."""

    def __init__(
        self,
        definition: JobDefinition[Any],
        options: JobOptions,
        client: Client | AsyncClient | None,
        *,
        via_set: bool = False,
    ) -> None:
        self.definition = definition
        self.options = options
        self.client = client
        self.via_set = via_set

    def perform_async(self, *args: Any) -> str:
        return self._push(list(args), None)

    def perform_in(self, interval: float, *args: Any) -> str:
        """Run after ``interval`` seconds (values of 1e9 and more are taken as timestamps, as in Sidekiq)."""
        return self._push(list(args), _after(interval))

    def perform_at(self, when: float | datetime, *args: Any) -> str:
        return self._push(list(args), _epoch(when))

    def perform_bulk(self, args_list: Iterable[Sequence[Any]], batch_size: int = 1000) -> list[str]:
        jids = self._client().push_bulk(
            self._bulk_item(args_list),
            batch_size=batch_size,
            flow=self.options.flow,
            signature=self.definition.signature,
        )
        return [jid for jid in jids if jid is not None]

    def aperform_async(self, *args: Any) -> Coroutine[Any, Any, str]:
        return self._apush(list(args), None)

    def aperform_in(self, interval: float, *args: Any) -> Coroutine[Any, Any, str]:
        return self._apush(list(args), _after(interval))

    def aperform_at(self, when: float | datetime, *args: Any) -> Coroutine[Any, Any, str]:
        return self._apush(list(args), _epoch(when))

    async def aperform_bulk(self, args_list: Iterable[Sequence[Any]], batch_size: int = 1000) -> list[str]:
        jids = await self._async_client().apush_bulk(
            self._bulk_item(args_list),
            batch_size=batch_size,
            flow=self.options.flow,
            signature=self.definition.signature,
        )
        return [jid for jid in jids if jid is not None]

    def _bulk_item(self, args_list: Iterable[Sequence[Any]]) -> payload.JobDict:
        all_args = [list(args) for args in args_list]
        for args in all_args:
            self.definition.check_args(args)
        return {**self.options.payload_head(), "class": self.definition.name, "args": all_args}

    def _push(self, args: list[Any], at: float | None) -> str:
        client = self._client()
        if at is None and self.options is self.definition.options:
            return client.push_now(self.definition, args) or ""
        item = self._item(args, at)
        return client.push(item, flow=self.options.flow, signature=self.definition.signature) or ""

    async def _apush(self, args: list[Any], at: float | None) -> str:
        client = self._async_client()
        # The job is made in its turn: see ``AsyncClient.turn``.
        turn = client.turn()
        if turn is not None:
            await turn
        pushed = await client.apush_in_turn(
            self._item(args, at), flow=self.options.flow, signature=self.definition.signature
        )
        return pushed or ""

    def _item(self, args: list[Any], at: float | None) -> payload.JobDict:
        self.definition.check_args(args)
        head = self.options.payload_head()
        name = self.definition.name
        # Key order as Sidekiq writes it: args before class, except a plain perform_in/perform_at
        # (Ruby's Setter, behind set(), always writes args first).
        if at is None or self.via_set:
            item: payload.JobDict = {**head, "args": args, "class": name}
        else:
            item = {**head, "class": name, "args": args}
        if at is not None:
            item["at"] = at
        return item

    def _client(self) -> Client:
        client = self.client
        if client is None:
            return _default_client()
        if not hasattr(client, "push"):
            raise TypeError("perform_* needs a Client; an AsyncClient serves aperform_*")
        return cast("Client", client)

    def _async_client(self) -> AsyncClient:
        client = self.client
        if client is None:
            return _default_async_client()
        if not hasattr(client, "apush"):
            raise TypeError("aperform_* needs an AsyncClient; a Client serves perform_*")
        return cast("AsyncClient", client)


def _after(interval: float) -> float:
    """When a job pushed to run in ``interval`` seconds runs (1e9 and more: a timestamp, as in Sidekiq)."""
    return float(interval) if interval >= 1_000_000_000 else payload.now() + float(interval)


def _epoch(when: float | datetime) -> float:
    return when.timestamp() if isinstance(when, datetime) else float(when)


def _default_client() -> Client:
    """``client.default_client()``: imported at the first push, since the client module imports
    this one, and kept, since an import statement per push costs half a microsecond."""
    global _default_client
    from asynctask.client import default_client

    _default_client = default_client
    return default_client()


def _default_async_client() -> AsyncClient:
    """``async_client.default_async_client()``, imported and kept as ``_default_client`` is."""
    global _default_async_client
    from asynctask.async_client import default_async_client

    _default_async_client = default_async_client
    return default_async_client()


@overload
def job(func: Callable[P, Any], /) -> JobDefinition[P]: ...


@overload
def job(
    *,
    name: str | None = None,
    queue: str = "default",
    retry: bool | int = True,
    backtrace: bool | int = False,
    dead: bool = True,
    retry_queue: str | None = None,
    tags: Sequence[str] = (),
    registry: Registry | None = None,
    api: bool = False,
    item_schema: Mapping[str, Any] | None = None,
    concurrency_key: KeySpec | None = None,
    concurrency_limit: int | None = None,
    concurrency_on_failure: Literal["hold", "continue"] | None = None,
    rate_limit: str | None = None,
    rate_key: KeySpec | None = None,
    unique_for: float | None = None,
    unique_key: KeySpec | None = None,
    unique_until: Literal["start", "done"] | None = None,
    **extra: Any,
) -> Callable[[Callable[P, Any]], JobDefinition[P]]: ...


def job(
    func: Callable[P, Any] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str = "default",
    retry: bool | int = True,
    backtrace: bool | int = False,
    dead: bool = True,
    retry_queue: str | None = None,
    tags: Sequence[str] = (),
    registry: Registry | None = None,
    api: bool = False,
    item_schema: Mapping[str, Any] | None = None,
    concurrency_key: KeySpec | None = None,
    concurrency_limit: int | None = None,
    concurrency_on_failure: Literal["hold", "continue"] | None = None,
    rate_limit: str | None = None,
    rate_key: KeySpec | None = None,
    unique_for: float | None = None,
    unique_key: KeySpec | None = None,
    unique_until: Literal["start", "done"] | None = None,
    **extra: Any,
) -> JobDefinition[P] | Callable[[Callable[P, Any]], JobDefinition[P]]:
    """Define a job from a function: ``@job`` or ``@job(name="SleepWorker", queue="low", retry=5)``.

    ``api=True`` lets the HTTP API create tasks of this job; such a job takes one argument,
    its chunk of items (a list). ``item_schema`` is the JSON Schema each item must match.

    Flow control (docs/guide/flow-control.md): ``concurrency_key`` (a template such as
    ``"device:{device_id}"`` over the arguments, or a callable taking them) with
    ``concurrency_limit`` (default 1: the key's jobs run one at a time, in push order) and
    ``concurrency_on_failure`` (``"hold"``, the default, keeps the key's later jobs waiting
    while a failed one awaits its retry; ``"continue"`` lets them go on); ``rate_limit``
    (``"10/s"``, ``"600/m"``, ``"100/h"``) per ``rate_key`` (default: the job's name);
    ``unique_for`` seconds per ``unique_key`` (default: the name and args) until the job
    starts or is done (``unique_until``).
    """
    flow = FlowOptions(
        concurrency_key,
        concurrency_limit,
        concurrency_on_failure,
        rate_limit,
        rate_key,
        unique_for,
        unique_key,
        unique_until,
    )
    options = JobOptions(
        queue, retry, backtrace, dead, retry_queue, tuple(tags), dict(extra), flow
    ).validated()
    target = default_registry if registry is None else registry

    def decorate(fn: Callable[P, Any]) -> JobDefinition[P]:
        definition = JobDefinition(fn, name or fn.__name__, options, api=api, item_schema=item_schema)
        target.add(definition)
        return definition

    return decorate(func) if func is not None else decorate


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
