"""A task's concurrency key: a template over each item's fields, resolved item by item.

``"operator:{operator_id}"`` gives every item the key of its operator. Only plain field
names may appear between braces: attribute and index lookups (``{a.b}``, ``{a[0]}``),
conversions and format specs are refused, so a template sent over HTTP can only read the
item's own top-level fields, never an attribute of a Python object. A field must hold a
string or a number; anything else (null, true, an object) has no spelling a person would
recognise as a key.

A key given with a tenant is stored behind the tenant's name, written as a JSON string and a
slash (``"acme"/operator:7``): two tenants' keys never meet, so one tenant can neither hold up
another's jobs nor see its keys. The JSON string ends at its first unescaped quote, so no
tenant's prefix is the start of another's.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Callable, Mapping
from typing import Any

#: The longest key the payload carries (``concurrency_key``: 1 to 1000 characters).
MAX_KEY = 1000


class ItemKeyError(ValueError):
    """An item whose key cannot be resolved: ``field`` is the template's field at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class TemplateError(ValueError):
    """A concurrency key template that is not a plain template over item fields."""


class ItemKey:
    """Resolves one template (or a callable taking the item) for each item of a task."""

    def __init__(self, template: str | Callable[[Any], str], tenant: str | None = None) -> None:
        self.template = template
        self.prefix = tenant_prefix(tenant)
        self.fields: tuple[str, ...] = _fields(template) if isinstance(template, str) else ()

    def __call__(self, item: Any) -> str:
        """The stored key of ``item``; ItemKeyError when it has none."""
        if callable(self.template):
            key = self.template(item)
            if not isinstance(key, str):
                returned = type(key).__name__
                raise ItemKeyError(f"the concurrency key function returned {returned}, not a string")
        else:
            key = self.template.format_map(_values(item, self.fields)) if self.fields else self.template
        if not key:
            raise ItemKeyError("the concurrency key is empty")
        stored = self.prefix + key
        if len(stored) > MAX_KEY:
            raise ItemKeyError(f"the concurrency key is longer than {MAX_KEY} characters")
        return stored


def tenant_prefix(tenant: str | None) -> str:
    """What a tenant's keys start with (nothing without a tenant)."""
    return "" if tenant is None else json.dumps(tenant, ensure_ascii=False) + "/"


def _fields(template: str) -> tuple[str, ...]:
    if not template:
        raise TemplateError("concurrency_key must not be empty")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(f"concurrency_key is not a valid template: {exc}") from None
    names: list[str] = []
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name or not name.isidentifier() or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise TemplateError(
                f"concurrency_key may only name item fields, as {{field}}; {shown} is not one"
            )
        names.append(name)
    return tuple(dict.fromkeys(names))


def _values(item: Any, fields: tuple[str, ...]) -> dict[str, str]:
    if not isinstance(item, Mapping):
        message = f"the item is {_kind(item)}, not an object with the field {fields[0]!r}"
        raise ItemKeyError(message, fields[0])
    values: dict[str, str] = {}
    for name in fields:
        if name not in item:
            raise ItemKeyError(f"the item has no field {name!r}", name)
        value = item[name]
        if isinstance(value, str):
            values[name] = value
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            values[name] = str(value)
        else:
            raise ItemKeyError(f"the field {name!r} is {_kind(value)}, not a string or a number", name)
    return values


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return "a number" if isinstance(value, int | float) else type(value).__name__
