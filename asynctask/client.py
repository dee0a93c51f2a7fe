"""The client: validates jobs, runs the client middleware, pushes them to the broker."""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from inspect import Signature
from typing import TYPE_CHECKING, Any

from asynctask import payload
from asynctask.brokers import Broker, as_redis, open_broker
from asynctask.flow.options import OPTION_NAMES as FLOW_OPTION_NAMES
from asynctask.flow.options import FlowOptions
from asynctask.job_spec import JobOptions, JobSpec
from asynctask.keys import Keys
from asynctask.middleware import Chain, client_chain
from asynctask.registry import Registry, default_registry
from asynctask.settings import Settings
from asynctask.tracking import outbox

if TYPE_CHECKING:
    import redis


_SIDEKIQ_DEFAULTS: payload.JobDict = {"retry": True, "queue": "default"}
#: Jobs of a bulk push prepared between two pauses (``bulk_batches``).
PAUSE_EVERY = 100


class Client:
    """Pushes jobs. Threads may share one (its connection pools are sized by
    ``settings.concurrency``); a process makes its own after a fork (docs/guide/jobs.md).

    ``push`` takes a Sidekiq item: ``{"class": "HardJob", "args": [1, 2], "queue": ..., "at": ...}``.
    A class registered in this process contributes its options as defaults, as in Sidekiq;
    any other class name (a Ruby worker, say) gets Sidekiq's defaults.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        connection: Any = None,
        middleware: Chain[payload.JobDict] | None = None,
        registry: Registry | None = None,
    ) -> None:
        """``connection``: a Redis client or SQLAlchemy engine for the broker to use (the
        caller closes it); by default the broker opens its own from the settings."""
        self.settings = settings or Settings.from_env()
        self.broker: Broker = open_broker(self.settings, connection)
        self.middleware = client_chain if middleware is None else middleware
        self.registry = default_registry if registry is None else registry
        #: ``push_now``'s checked header of each definition pushed, with the options and the
        #: registered definition it was made from.
        self._templates: dict[JobSpec[Any], tuple[JobOptions, JobSpec[Any] | None, Template]] = {}

    def close(self) -> None:
        """Close the broker's connections, if the client opened them."""
        self.broker.close()

    @property
    def redis(self) -> redis.Redis:
        """The Redis connection of a Redis broker, for Sidekiq-level inspection."""
        return as_redis(self.broker).redis

    @property
    def keys(self) -> Keys:
        """The Redis key names of a Redis broker."""
        return as_redis(self.broker).keys

    def push(
        self, item: Mapping[str, Any], *, flow: FlowOptions | None = None, signature: Signature | None = None
    ) -> str | None:
        """Enqueue one job; return its jid, or None if a client middleware dropped it.

        A unique job whose key is taken is not pushed: the jid returned is the holder's.
        ``flow``: the job's flow-control options, in place of its definition's (``set()``
        passes them); flow options in ``item`` override either. ``signature``: the job
        function's, to bind key templates by name, in place of that of the definition this
        client's registry holds (a job may be defined in another registry).
        """
        normalized = template(item, self.registry, flow=flow, signature=signature)
        passed = through(normalized, normalized.job, self.middleware)
        if passed is None:
            return None
        pushed, transitions = passed
        return self.broker.push([(pushed, normalized.at)], transitions=transitions)[0]

    def push_now(self, definition: JobSpec[Any], args: list[Any]) -> str | None:
        """``push`` of ``definition``'s job with its own options and ``args``, to run now: what
        ``perform_async`` sends, the same payload, without normalizing and checking its header
        again at every call (the header is made once per definition, as ``push_bulk`` makes it
        once per call)."""
        definition.check_args(args)
        payload.check_args(args)
        options = definition.options
        registered = self.registry.registered(definition.name)
        cached = self._templates.get(definition)
        if cached is not None and cached[0] is options and cached[1] is registered:
            normalized = cached[2]
        else:
            item = {**options.payload_head(), "args": [], "class": definition.name}
            normalized = template(item, self.registry, flow=options.flow, signature=definition.signature)
            self._templates[definition] = (options, registered, normalized)
        job = {**normalized.job, "args": args, "jid": payload.new_jid(), "created_at": payload.now()}
        for key in normalized.mutable:
            # A middleware may change what it is given; the next push's header stays as made.
            job[key] = copy.deepcopy(job[key])
        passed = through(normalized, job, self.middleware)
        if passed is None:
            return None
        pushed, transitions = passed
        return self.broker.push([(pushed, None)], transitions=transitions)[0]

    def push_bulk(
        self,
        item: Mapping[str, Any],
        batch_size: int = 1000,
        *,
        flow: FlowOptions | None = None,
        signature: Signature | None = None,
    ) -> list[str | None]:
        """Enqueue one job per entry of ``item["args"]`` (a list of arg lists).

        ``item["at"]`` may be one timestamp or one per job. Each ``batch_size`` jobs cost one
        pipelined round trip. Returns the jids in order (None where middleware dropped a job;
        the holder's jid where a unique job's key was taken). ``flow`` and ``signature`` as
        for ``push``.
        """
        jids: list[str | None] = []
        for batch in bulk_batches(
            item, batch_size, self.registry, self.middleware, jids, flow=flow, signature=signature
        ):
            if batch is None:
                continue
            entries, transitions, positions = batch
            stored = self.broker.push(entries, transitions=transitions)
            for position, jid in zip(positions, stored, strict=True):
                jids[position] = jid
        return jids


def bulk_batches(
    item: Mapping[str, Any],
    batch_size: int,
    registry: Registry,
    middleware: Chain[payload.JobDict],
    jids: list[str | None],
    *,
    flow: FlowOptions | None,
    signature: Signature | None,
) -> Iterator[tuple[list[tuple[payload.JobDict, float | None]], list[str], list[int]] | None]:
    """``push_bulk``'s batches, checked: each batch's entries to push, the tracking transitions
    its middleware collected, and where in ``jids`` each entry's stored jid goes (``jids``
    gets a None per job, left for one a middleware dropped). A None every ``PAUSE_EVERY`` jobs
    between them is where an event loop's caller lets the loop run."""
    all_args = item.get("args")
    if not isinstance(all_args, list) or not all(isinstance(a, list) for a in all_args):
        raise TypeError("push_bulk needs 'args' as a list of argument lists")
    for args in all_args:
        payload.check_args(args)
    at = item.get("at")
    if isinstance(at, list) and len(at) != len(all_args):
        raise ValueError("push_bulk 'at' must have one timestamp per job")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    # Every job of the call shares one normalized, checked header (and created_at), as in
    # Sidekiq; each copy gets its own args and jid, in the header's key positions.
    shared = {**{k: v for k, v in item.items() if k not in ("at", "jid")}, "args": []}
    normalized = template(shared, registry, flow=flow, signature=signature)
    for start in range(0, len(all_args), batch_size):
        entries: list[tuple[payload.JobDict, float | None]] = []
        positions: list[int] = []
        end = min(start + batch_size, len(all_args))
        # One collection for the batch: what a dropped job recorded is cut back out.
        with outbox.collect() as transitions:
            for index, jid in zip(range(start, end), payload.new_jids(end - start), strict=True):
                job = {**normalized.job, "args": all_args[index], "jid": jid}
                when = _run_at(at[index] if isinstance(at, list) else at)
                if index % PAUSE_EVERY == PAUSE_EVERY - 1:
                    yield None
                recorded = len(transitions)
                pushed = _invoke(normalized, job, middleware)
                jids.append(None)
                if pushed is None:
                    del transitions[recorded:]
                else:
                    positions.append(len(jids) - 1)
                    entries.append((pushed, when))
        if entries:
            yield entries, transitions, positions


@dataclass(frozen=True)
class Template:
    """A job normalized and checked once, to push many times (copies with their own jid)."""

    job: payload.JobDict
    at: float | None
    flow: FlowOptions
    #: The job function's signature, to bind its flow keys' templates (None without flow keys).
    signature: Signature | None

    @cached_property
    def mutable(self) -> tuple[str, ...]:
        """The header's keys whose values a copy must not share (lists and dicts)."""
        job = self.job
        return tuple(key for key, value in job.items() if key != "args" and isinstance(value, list | dict))


def template(
    item: Mapping[str, Any],
    registry: Registry,
    *,
    flow: FlowOptions | None = None,
    signature: Signature | None = None,
) -> Template:
    """``item`` normalized as ``Client.push`` does (defaults of its registered definition, a
    jid, the creation time) and checked; its flow keys are resolved per copy, by ``through``."""
    job, at, options = normalize(item, payload.check_args(item.get("args")), registry, flow=flow)
    _check_header(job)
    return Template(job, at, options, _signature(job, registry, signature) if options.active else None)


def through(
    template: Template, job: payload.JobDict, middleware: Chain[payload.JobDict]
) -> tuple[payload.JobDict, tuple[str, ...]] | None:
    """``job`` (the template's job, or a copy of it) with its flow keys resolved, through the
    client ``middleware``; with the tracking transitions the middleware collected. None if a
    middleware dropped it."""
    with outbox.collect() as transitions:
        pushed = _invoke(template, job, middleware)
    return None if pushed is None else (pushed, tuple(transitions))


def _invoke(
    template: Template, job: payload.JobDict, middleware: Chain[payload.JobDict]
) -> payload.JobDict | None:
    """``through`` inside a collection of transitions already open."""
    if template.flow.active:
        job.update(template.flow.payload_fields(job["class"], job["args"], template.signature))
    return middleware.invoke(job, job["queue"], final=_returning(job))


def _signature(job: payload.JobDict, registry: Registry, given: Signature | None) -> Signature | None:
    """The job function's signature to bind key templates by name: ``given``, else that of
    the definition this client's registry holds, if any."""
    name = job["class"]
    if given is None and name in registry:
        return registry.get(name).signature
    return given


def normalize(
    item: Mapping[str, Any],
    args: list[Any],
    registry: Registry,
    created_at: float | None = None,
    *,
    flow: FlowOptions | None = None,
) -> tuple[payload.JobDict, float | None, FlowOptions]:
    """Sidekiq's ``normalize_item``: defaults first, then the caller's keys, then jid and
    created_at. The flow-control options (the definition's or ``flow``, overridden by the
    item's) come out apart, unresolved: their keys depend on each job's args."""
    if not isinstance(item, Mapping):
        raise TypeError(f"a job item must be a mapping, got {type(item).__name__}")
    name = item.get("class")
    if isinstance(name, JobSpec):
        name = name.name
    if not isinstance(name, str) or not name:
        raise TypeError("a job item needs 'class': a non-empty job name")
    definition = registry.get(name) if name in registry else None
    defaults = definition.options.payload_head() if definition is not None else _SIDEKIQ_DEFAULTS
    job: payload.JobDict = {**defaults, **item, "class": name, "args": args}
    base = flow if flow is not None else definition.options.flow if definition is not None else FlowOptions()
    # Most items name no flow option: they are not looked up one by one.
    options = (
        base
        if _FLOW_OPTIONS.isdisjoint(job)
        else base.merged({k: job.pop(k) for k in FLOW_OPTION_NAMES if k in job})
    )
    at = _run_at(job.pop("at", None))
    if not isinstance(job["queue"], str) or not job["queue"]:
        raise TypeError("'queue' must be a non-empty string")
    retry = job.get("retry")
    if not isinstance(retry, bool | int):
        raise TypeError(f"'retry' must be true, false or an integer, got {retry!r}")
    if "jid" not in job:
        job["jid"] = payload.new_jid()
    elif not isinstance(job["jid"], str) or not job["jid"]:
        raise TypeError("'jid' must be a non-empty string")
    if "created_at" not in job:
        job["created_at"] = created_at if created_at is not None else payload.now()
    payload.check_names(job)
    return job, at, options


def _returning(job: payload.JobDict) -> Callable[[], payload.JobDict]:
    """The end of the client chain: the job as the middleware left it."""
    return lambda: job


def _run_at(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"'at' must be an epoch timestamp in seconds, got {value!r}")
    return float(value)


def _check_header(job: payload.JobDict) -> None:
    """Every key but args (checked on their own) must be JSON-native too."""
    for key, value in job.items():
        if key == "args":
            continue
        kind = type(value)
        if type(key) is not str or not (kind in _SCALARS or (kind is float and math.isfinite(value))):
            # The whole check, which names the culprit if there is one.
            payload.check_args([{k: v for k, v in job.items() if k != "args"}])
            return


#: The header values that pass as they are: every job's retry, queue, class, jid.
_SCALARS = frozenset({str, bool, int, type(None)})
_FLOW_OPTIONS = frozenset(FLOW_OPTION_NAMES)


_default_lock = threading.Lock()
_default: Client | None = None


def default_client() -> Client:
    """The client ``perform_async`` uses: configured by ``configure()`` or from the environment."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def configured() -> Client | None:
    """The default client if ``configure()`` set one (or a push made one)."""
    with _default_lock:
        return _default


def configure(settings: Settings | None = None, **kwargs: Any) -> Client:
    """Set the default client, from ``settings`` or ``Client(**kwargs)`` arguments."""
    global _default
    client = Client(settings, **kwargs)
    with _default_lock:
        _default = client
    return client
