"""A change to a running task's feed as the API takes it: the body of ``PATCH /api/tasks/<id>``
(JSON) and the dashboard's form (text). The values follow ``TaskOptions``' rules for
``parallel``, ``interval`` and ``priority``, the same as at creation.

Every refusal is 422 ``invalid_request`` naming the field in ``details.field``: a value of
the wrong type (``true``, ``"x"``, ``1.5`` for an integer), out of range (``parallel: 0``), or
an unknown field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import IO, Any

from asynctask.tasks.options import TaskOptionError, TaskOptions
from webapi import formats
from webapi.config import ApiConfig
from webapi.errors import ApiError

#: The feed settings, in the order they are documented.
FIELDS = ("parallel", "interval", "priority")


def checked(options: Mapping[str, Any]) -> dict[str, Any]:
    """The feed settings among ``options``, each checked and converted (an integral float such
    as ``2.0`` is the integer 2: JSON does not tell them apart)."""
    return _refused_as_422(
        lambda: {name: TaskOptions.json_value(name, options[name]) for name in FIELDS if name in options}
    )


def from_text(form: Mapping[str, str]) -> dict[str, Any]:
    """The feed settings given as form fields (text), as the JSON values they stand for; text
    that is no number is refused here, naming its field."""
    return _refused_as_422(
        lambda: {name: TaskOptions.text_value(name, form[name]) for name in FIELDS if name in form}
    )


def _refused_as_422(read: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return read()
    except TaskOptionError as exc:
        raise ApiError(422, "invalid_request", str(exc), {"field": exc.field}) from None


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
