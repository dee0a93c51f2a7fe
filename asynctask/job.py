"""``@asynctask.job``: a function becomes a job that can be enqueued by name.

The name is the Sidekiq ``class`` string (by default the function's name; set it to a Ruby
class name such as ``"SleepWorker"`` to share a queue with Ruby code). Options mirror
``sidekiq_options`` and are written into every payload, as Sidekiq does, so Ruby tooling
sees them and middleware can read them (``job.get("track")``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, cast, overload

from asynctask import payload
from asynctask.flow.options import FlowOptions, KeySpec
from asynctask.job_spec import JobOptions, JobSpec
from asynctask.registry import Registry, default_registry

if TYPE_CHECKING:
    from asynctask.async_client import AsyncClient
    from asynctask.client import Client

P = ParamSpec("P")


class JobDefinition(JobSpec[P]):
    """A registered job. Calling it runs the function inline; ``perform_*`` enqueue it."""

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
    """``client.default_client()``: imported at the first push, since a process that defines
    jobs and pushes none (another runtime's worker, say) need not load the brokers' client
    libraries, and kept, since an import statement per push costs half a microsecond."""
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
