"""A task's feed settings as the API takes them: ``parallel``, ``interval`` and ``priority`` of
``POST /api/tasks`` (JSON fields, or query and form fields as text), and the body of
``PATCH /api/tasks/<id>``.

Every refusal is 422 ``invalid_request`` naming the field in ``details.field``: a value of
the wrong type (``true``, ``"x"``, ``1.5`` for an integer), out of range (``parallel: 0``),
an unknown field, or ``interval``/``priority`` without ``parallel`` at creation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

from asynctask.feeds.model import MAX_INTERVAL, MAX_PARALLEL, PRIORITY_MAX, PRIORITY_MIN
from webapi import formats
from webapi.config import ApiConfig
from webapi.errors import ApiError

#: The feed settings, in the order they are documented.
FIELDS = ("parallel", "interval", "priority")
#: The settings that are integers (``interval`` is a number of seconds).
INTEGERS = ("parallel", "priority")


@dataclass(frozen=True)
class FeedOptions:
    """A task's feed at creation: ``parallel`` None means the task is not fed."""

    parallel: int | None = None
    interval: float = 0.0
    priority: int | None = None


def creation_options(options: Mapping[str, Any]) -> FeedOptions:
    """The feed of a new task, from the submission's options (JSON values)."""
    if "parallel" not in options:
        for name in ("interval", "priority"):
            if name in options:
                raise ApiError(
                    422, "invalid_request", f"{name} needs parallel: it tunes a fed task", {"field": name}
                )
        return FeedOptions()
    values = checked(options)
    return FeedOptions(values["parallel"], values.get("interval", 0.0), values.get("priority"))


def checked(options: Mapping[str, Any]) -> dict[str, Any]:
    """The feed settings among ``options``, each checked and converted (an integral float such
    as ``2.0`` is the integer 2: JSON does not tell them apart)."""
    values: dict[str, Any] = {}
    for name in FIELDS:
        if name not in options:
            continue
        value = options[name]
        if name in INTEGERS:
            values[name] = _integer(name, value)
        else:
            values[name] = _seconds(value)
    return values


def _integer(name: str, value: Any) -> int:
    low, high = (1, MAX_PARALLEL) if name == "parallel" else (PRIORITY_MIN, PRIORITY_MAX)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ApiError(
            422, "invalid_request", f"{name} must be an integer from {low} to {high}", {"field": name}
        )
    return value


def _seconds(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= MAX_INTERVAL
    ):
        raise ApiError(
            422,
            "invalid_request",
            f"interval must be a number of seconds from 0 to {MAX_INTERVAL:g}",
            {"field": "interval"},
        )
    return float(value)


#: Numbers as query or form fields: plain ASCII decimals (Python's int() and float() would
#: also take "١٢", " 3 ", "1_000" or "infinity").
_INTEGER_TEXT = re.compile(r"-?[0-9]{1,20}")
_SECONDS_TEXT = re.compile(r"[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?")


def from_text(form: Mapping[str, str]) -> dict[str, Any]:
    """The feed settings given as query or form fields (text), as the JSON values they stand for;
    text that is no number is refused here, naming its field."""
    values: dict[str, Any] = {}
    for name in FIELDS:
        if name not in form:
            continue
        text = form[name]
        if name in INTEGERS and _INTEGER_TEXT.fullmatch(text):
            values[name] = int(text)
        elif name not in INTEGERS and _SECONDS_TEXT.fullmatch(text):
            values[name] = float(text)
        else:
            kind = "an integer" if name in INTEGERS else "a number of seconds"
            raise ApiError(422, "invalid_request", f"{name} must be {kind}", {"field": name})
    return values


def read_change(stream: IO[bytes], config: ApiConfig) -> dict[str, Any]:
    """The body of ``PATCH /api/tasks/<id>``: a JSON object of at least one of ``FIELDS``."""
    reader = formats.json_reader(stream, config)
    if not reader.begin_object():
        formats.not_an_object(reader)
    change: dict[str, Any] = {}
    first = True
    while (key := reader.next_key(first)) is not None:
        first = False
        if key in change:
            raise ApiError(422, "invalid_request", f"field {key!r} is given twice", {"field": key})
        if key not in FIELDS:
            raise ApiError(422, "invalid_request", f"unknown field {key!r}", {"field": key})
        change[key] = reader.value(formats.FIELD_LEVEL)
    reader.end()
    if not change:
        raise ApiError(
            422, "invalid_request", "give at least one of parallel, interval and priority", {"field": None}
        )
    return checked(change)
