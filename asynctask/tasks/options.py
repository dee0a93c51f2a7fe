"""``TaskOptions``: how a task's items become jobs (chunks, queue, keys, feed), as one value.

It is built once, from a Python call (``create_task(job, items, chunk_size=10)``), a JSON body
(``from_json``) or text fields (``from_text``, for query strings and forms), and checked once,
when it is built. ``create_task`` takes it whole. Each option's JSON Schema stands
beside its field (``request_schema``): the HTTP API reads and documents the fields from there,
so an option added here is an option of every entry point.

``None`` means "not given" for every option but ``chunk_size``, so a setting that tunes another
(``interval`` tunes ``parallel``) is refused when given alone, whichever way it came.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any, Literal, TypedDict

from asynctask import payload, storable
from asynctask.feeds.model import MAX_INTERVAL, MAX_PARALLEL, PRIORITY_MAX, PRIORITY_MIN, Feed
from asynctask.job_spec import JobSpec
from asynctask.tasks.itemkeys import ItemKey

#: Tasks one task may wait for.
MAX_PARENTS = 100
#: The largest ``concurrency_limit``: what every store's integer column holds.
MAX_CONCURRENCY_LIMIT = 2**31 - 1
#: Queue names a request may give: safe in a URL and a log line as they are.
REQUEST_QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
REQUEST_QUEUE_RULE = "queue must be 1 to 100 letters, digits or _ . : -"
#: Numbers as text: plain ASCII decimals (Python's int() and float() would also take "١٢",
#: " 3 ", "1_000" or "infinity").
_INTEGER_TEXT = re.compile(r"-?[0-9]{1,20}")
_NUMBER_TEXT = re.compile(r"[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?")


class TaskOptionError(ValueError):
    """An option no task can have; ``field`` names it. (A key template that is no template
    raises ``TemplateError``, a string no store can keep ``InvalidString``.)"""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _request(
    kind: str, description: str, *, needs: str | None = None, nullable: bool = False, **schema: Any
) -> dict[str, Any]:
    """The metadata of an option a request may give: its JSON Schema (``kind``, ``description``
    and the rest of ``schema``), the option it tunes (``needs``), and whether a JSON body may
    give it as null, meaning "not given" (``nullable``)."""
    return {
        "schema": {"type": kind, **schema, "description": description},
        "needs": needs,
        "nullable": nullable,
    }


@dataclass(frozen=True, kw_only=True)
class TaskOptions:
    """How ``create_task`` splits, places, keys and feeds a task's jobs."""

    chunk_size: int = field(default=1, metadata=_request("integer", "Items per job.", minimum=1, default=1))
    queue: str | None = field(
        default=None,
        metadata=_request(
            "string",
            "The queue to use instead of the job's own.",
            pattern=f"^{REQUEST_QUEUE_NAME.pattern}$",
            nullable=True,
        ),
    )
    meta: Mapping[str, Any] | None = field(
        default=None, metadata=_request("object", "Kept with the task, returned as is.", nullable=True)
    )
    #: A template over each item's fields (``"operator:{operator_id}"``, see ``itemkeys``) or,
    #: from Python, a function of the item.
    concurrency_key: str | Callable[[Any], str] | None = field(
        default=None,
        metadata=_request(
            "string",
            "A template over each item's fields, such as `operator:{operator_id}`: at most "
            "`concurrency_limit` jobs of one key run at once, in the order of their items. A chunk "
            "holds items of one key only. Only `{field}` names may stand in braces; each must be a "
            "string or number of every item (422 `invalid_concurrency_key`, "
            "`concurrency_key_unresolved`). Keys are the tenant's own.",
            minLength=1,
        ),
    )
    concurrency_limit: int | None = field(
        default=None,
        metadata=_request(
            "integer",
            "Jobs of one key running at once (with a key).",
            minimum=1,
            maximum=MAX_CONCURRENCY_LIMIT,
            default=1,
            needs="concurrency_key",
        ),
    )
    concurrency_on_failure: Literal["hold", "continue"] | None = field(
        default=None,
        metadata=_request(
            "string",
            "`hold`: a failed job awaiting its retry keeps its slot, so the key's later jobs wait; "
            "`continue`: they go on (with a key).",
            enum=["hold", "continue"],
            default="hold",
            needs="concurrency_key",
        ),
    )
    parallel: int | None = field(
        default=None,
        metadata=_request(
            "integer",
            "The task is fed: its jobs are held back and released so that at most this many are "
            "queued or running at once.",
            minimum=1,
            maximum=MAX_PARALLEL,
        ),
    )
    interval: float | None = field(
        default=None,
        metadata=_request(
            "number",
            "Seconds between two releases of jobs (each tops up to `parallel`); 0: release whenever "
            "a job ends. Needs `parallel`.",
            minimum=0,
            maximum=MAX_INTERVAL,
            default=0,
            needs="parallel",
        ),
    )
    priority: int | None = field(
        default=None,
        metadata=_request(
            "integer",
            "Lower runs first; 0 is every other job's. Needs `parallel`.",
            minimum=PRIORITY_MIN,
            maximum=PRIORITY_MAX,
            default=0,
            needs="parallel",
        ),
    )
    on_complete: str | None = field(
        default=None,
        metadata=_request(
            "string",
            "A job pushed once when the task ends, whatever its outcome. It gets the task's summary "
            "(`task_id`, `status`, `counts`, `items`, `first_errors`...) as its first argument, then "
            "`callback_args`.",
            minLength=1,
            maxLength=255,
            nullable=True,
        ),
    )
    on_success: str | None = field(
        default=None,
        metadata=_request(
            "string",
            "A job pushed once when the task ends with every job and item done well (status "
            "`finished`), as `on_complete` is.",
            minLength=1,
            maxLength=255,
            nullable=True,
        ),
    )
    on_failure: str | None = field(
        default=None,
        metadata=_request(
            "string",
            "A job pushed once when the task ends otherwise (`finished_with_errors`, `cancelled`), as "
            "`on_complete` is.",
            minLength=1,
            maxLength=255,
            nullable=True,
        ),
    )
    callback_args: Sequence[Any] | None = field(
        default=None,
        metadata=_request("array", "What each callback job gets after the task's summary.", nullable=True),
    )
    after: Sequence[str] | None = field(
        default=None,
        metadata=_request(
            "array",
            "Ids of existing tasks this one waits for: it is created at once, its jobs held until "
            "every one of them ended (422 `unknown_parent` for an id that is no task of the caller's).",
            items={"type": "string", "minLength": 1, "maxLength": 32},
            minItems=1,
            maxItems=MAX_PARENTS,
            nullable=True,
        ),
    )
    run_if: Literal["success", "complete"] | None = field(
        default=None,
        metadata=_request(
            "string",
            "`success`: the task is cancelled if a task it waits for did not end `finished`; "
            "`complete`: it runs however they ended. Needs `after`.",
            enum=["success", "complete"],
            default="success",
            needs="after",
        ),
    )
    #: Whose task it is: its concurrency keys are the tenant's own. The API sets it from the
    #: caller, never from the request.
    tenant: str | None = None

    def __post_init__(self) -> None:
        for name in CALLBACK_FIELDS.values():
            value = getattr(self, name)
            if isinstance(value, JobSpec):
                # From Python a callback may be the job itself; it is kept by name, as stored.
                object.__setattr__(self, name, value.name)
        if self.callback_args is not None and not self.callbacks:
            raise TaskOptionError(
                "callback_args", "callback_args needs on_complete, on_success or on_failure"
            )
        for name, schema in _SCHEMAS.items():
            value = getattr(self, name)
            if value is None and name not in _REQUIRED:
                continue
            needs = _NEEDS.get(name)
            if needs is not None and getattr(self, needs) is None:
                raise TaskOptionError(name, f"{name} needs {needs}: {_TUNES[needs]}")
            if name == "meta":
                _check_meta(value)
            elif not (name == "concurrency_key" and callable(value)):
                _check(name, value, schema)
        if self.tenant is not None and not isinstance(self.tenant, str):
            raise TaskOptionError("tenant", "tenant must be a string")
        if self.concurrency_key is not None:
            # Built now: a template that is no template is refused before anything is read.
            self.item_key  # noqa: B018

    @cached_property
    def item_key(self) -> ItemKey | None:
        """The key of each item (the tenant's own), or None for a task without a key; raises
        ``TemplateError`` for a template that is no template."""
        if self.concurrency_key is None:
            return None
        return ItemKey(self.concurrency_key, self.tenant)

    @property
    def feed(self) -> Feed | None:
        """The task's feed, or None for a task whose jobs are all queued at once."""
        if self.parallel is None:
            return None
        interval = 0.0 if self.interval is None else float(self.interval)
        return Feed(parallel=self.parallel, interval=interval, priority=self.priority or 0)

    @property
    def callbacks(self) -> dict[str, str]:
        """The task's callback jobs' names, by kind (complete, success, failure)."""
        return {
            kind: name
            for kind, field_name in CALLBACK_FIELDS.items()
            if (name := getattr(self, field_name)) is not None
        }

    @property
    def key_limit(self) -> int:
        return 1 if self.concurrency_limit is None else self.concurrency_limit

    @property
    def key_on_failure(self) -> Literal["hold", "continue"]:
        return self.concurrency_on_failure or "hold"

    def merged(self, given: Mapping[str, Any]) -> TaskOptions:
        """These options with ``given`` (keyword arguments of ``create_task``) on top."""
        return replace(self, **given) if given else self

    @classmethod
    def from_json(cls, values: Mapping[str, Any], *, tenant: str | None = None) -> TaskOptions:
        """Options as JSON gives them (an integral number such as ``2.0`` is the integer 2: JSON
        does not tell them apart). An unknown field is refused, naming it."""
        return cls(**{name: cls.json_value(name, value) for name, value in values.items()}, tenant=tenant)

    @staticmethod
    def json_value(name: str, value: Any) -> Any:
        """Option ``name`` as JSON gives it, checked, and converted where JSON is loose (an
        integral number such as ``2.0`` is the integer 2: JSON does not tell them apart)."""
        schema = _schema_of(name)
        if value is None:
            if name not in _NULLABLE:
                raise TaskOptionError(name, f"{name} may not be null")
            return None
        if schema["type"] == "integer" and isinstance(value, float) and value.is_integer():
            value = int(value)
        _check(name, value, schema)
        if name == "queue" and not REQUEST_QUEUE_NAME.fullmatch(value):
            raise TaskOptionError(name, REQUEST_QUEUE_RULE)
        return value

    @classmethod
    def from_text(
        cls, values: Mapping[str, str], *, tenant: str | None = None, read_object: Callable[[str, str], Any]
    ) -> TaskOptions:
        """Options given as text (query or form fields): numbers must be plain decimals;
        ``read_object`` parses an object option (``meta``) from its text."""
        return cls.from_json(
            {name: cls.text_value(name, text, read_object) for name, text in values.items()}, tenant=tenant
        )

    @staticmethod
    def text_value(name: str, text: str, read_object: Callable[[str, str], Any] | None = None) -> Any:
        """The JSON value option ``name`` given as ``text`` stands for; text that is no number
        where a number is due is refused, naming the option."""
        kind = _schema_of(name)["type"]
        if kind == "integer":
            if not _INTEGER_TEXT.fullmatch(text):
                raise TaskOptionError(name, f"{name} must be an integer")
            return int(text)
        if kind == "number":
            if not _NUMBER_TEXT.fullmatch(text):
                raise TaskOptionError(name, f"{name} must be a number of seconds")
            return float(text)
        if kind in ("object", "array"):
            if read_object is None:
                raise TaskOptionError(name, f"{name} cannot be given as text here")
            return read_object(name, text) if text else None
        return text

    @staticmethod
    def request_fields() -> tuple[str, ...]:
        """The options a request may give, in the order they are documented."""
        return tuple(_SCHEMAS)

    @staticmethod
    def request_schema() -> dict[str, dict[str, Any]]:
        """Each request option's JSON Schema, by name."""
        return {name: dict(schema) for name, schema in _SCHEMAS.items()}

    @staticmethod
    def nullable() -> frozenset[str]:
        """The options a JSON body may give as null."""
        return _NULLABLE

    @staticmethod
    def needs() -> dict[str, str]:
        """What each option that tunes another needs (``interval`` needs ``parallel``)."""
        return dict(_NEEDS)


class TaskFields(TypedDict, total=False):
    """``TaskOptions``' fields as keyword arguments of ``create_task``."""

    chunk_size: int
    queue: str | None
    meta: Mapping[str, Any] | None
    concurrency_key: str | Callable[[Any], str] | None
    concurrency_limit: int | None
    concurrency_on_failure: Literal["hold", "continue"] | None
    parallel: int | None
    interval: float | None
    priority: int | None
    on_complete: str | JobSpec[Any] | None
    on_success: str | JobSpec[Any] | None
    on_failure: str | JobSpec[Any] | None
    callback_args: Sequence[Any] | None
    after: Sequence[str] | None
    run_if: Literal["success", "complete"] | None
    tenant: str | None


#: The option naming each kind of callback.
CALLBACK_FIELDS = {"complete": "on_complete", "success": "on_success", "failure": "on_failure"}

_SCHEMAS: dict[str, dict[str, Any]] = {
    option.name: option.metadata["schema"] for option in fields(TaskOptions) if "schema" in option.metadata
}
_NEEDS: dict[str, str] = {
    option.name: option.metadata["needs"] for option in fields(TaskOptions) if option.metadata.get("needs")
}
#: Options that always have a value (their default when not given).
_REQUIRED = frozenset(option.name for option in fields(TaskOptions) if option.default is not None)
_NULLABLE = frozenset(option.name for option in fields(TaskOptions) if option.metadata.get("nullable"))
_TUNES = {
    "parallel": "it tunes a fed task",
    "concurrency_key": "it tunes a keyed task",
    "after": "it says when a task that waits for others runs",
}


def _schema_of(name: str) -> dict[str, Any]:
    """The JSON Schema of request option ``name``; an unknown name is refused, naming it."""
    schema = _SCHEMAS.get(name)
    if schema is None:
        raise TaskOptionError(name, f"unknown field {name!r}")
    return schema


def _check(name: str, value: Any, schema: Mapping[str, Any]) -> None:
    """Refuse ``value`` unless it is what ``schema`` says ``name`` holds."""
    kind = schema["type"]
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int) or not _within(value, schema):
            raise TaskOptionError(name, f"{name} must be an integer {_range(schema)}")
    elif kind == "number":
        # NaN is within no bounds, and infinity beyond every maximum: both are refused here.
        if isinstance(value, bool) or not isinstance(value, int | float) or not _within(value, schema):
            raise TaskOptionError(name, f"{name} must be a number of seconds {_range(schema)}")
    elif kind == "array":
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise TaskOptionError(name, f"{name} must be an array")
        if "items" in schema:
            _check_ids(name, value, schema)
        try:
            payload.check_args(list(value))
            storable.check(list(value), name)
        except ValueError as exc:
            raise TaskOptionError(name, f"{name}: {exc}") from None
    elif "enum" in schema:
        if value not in schema["enum"]:
            raise TaskOptionError(name, f"{name} must be {' or '.join(schema['enum'])}")
    elif kind == "string":
        # An empty one is refused by the rule of what it names (a queue, a key template).
        if not isinstance(value, str):
            raise TaskOptionError(name, f"{name} must be a string")
        if name == "concurrency_key":
            # A template is stored in the payload and the key tables as it is; a queue name
            # meets the payload's rule for names when its jobs are made.
            storable.check(value, name)


def _check_ids(name: str, value: Sequence[Any], schema: Mapping[str, Any]) -> None:
    """An array of task ids: strings of a task id's length, as many as ``schema`` allows."""
    if not schema["minItems"] <= len(value) <= schema["maxItems"]:
        raise TaskOptionError(
            name, f"{name} must hold from {schema['minItems']} to {schema['maxItems']} task ids"
        )
    longest = schema["items"]["maxLength"]
    for index, item in enumerate(value):
        if not isinstance(item, str) or not 1 <= len(item) <= longest:
            raise TaskOptionError(name, f"{name}[{index}] must be a task id (1 to {longest} characters)")


def _within(value: float, schema: Mapping[str, Any]) -> bool:
    low: float = schema.get("minimum", -math.inf)
    high: float = schema.get("maximum", math.inf)
    return low <= value <= high


def _range(schema: Mapping[str, Any]) -> str:
    low, high = _plain(schema["minimum"]), schema.get("maximum")
    return f"of at least {low}" if high is None else f"from {low} to {_plain(high)}"


def _plain(bound: float) -> int | float:
    """A bound as a person writes it: 86400, not 86400.0 or 8.64e+04."""
    return int(bound) if float(bound).is_integer() else bound


def _check_meta(value: Any) -> None:
    """``meta`` is stored as JSON: a mapping of JSON-native values whose strings a store keeps
    (``InvalidString`` names the one that it cannot)."""
    if not isinstance(value, Mapping):
        raise TaskOptionError("meta", "meta must be a JSON object")
    payload.check_args([dict(value)])
    storable.check(dict(value), "meta")
