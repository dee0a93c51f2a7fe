"""JSON Schema (2020-12, as OpenAPI 3.1 takes it) from typed models: the API's bodies are
``TypedDict`` classes, and the document describes them from their annotations, so a field the
code adds, drops or retypes changes the document with it.

A field's type gives its schema: ``str``, ``int``, ``float``, ``bool``, ``None`` (in a union:
nullable), ``Any`` (any JSON), ``list[X]``, ``dict[str, X]``, ``Literal[...]`` (a ``const`` or
an ``enum``) and another model (inline, or a ``$ref`` when it is one of the named components).
``Annotated[X, Keywords(...)]`` adds what a type cannot say (a description, a bound, a format);
a model's docstring is its description. A model is a closed object (``additionalProperties:
false``) requiring its keys but those marked ``NotRequired``.
"""

import types
import typing
from collections.abc import Collection, Iterable
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
    is_typeddict,
)

Schema = dict[str, Any]

#: The JSON Schema type of each Python type a field may have.
_SCALARS: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_LITERAL_TYPES: dict[type, str] = {str: "string", int: "integer", bool: "boolean"}


class Keywords:
    """JSON Schema keywords for a field, in its ``Annotated`` metadata:
    ``Annotated[int, Keywords(minimum=0, description="Jobs in the task.")]``."""

    __slots__ = ("values",)

    def __init__(self, **values: Any) -> None:
        self.values = values

    def __repr__(self) -> str:
        return f"Keywords({', '.join(f'{name}={value!r}' for name, value in self.values.items())})"


def component_schemas(models: Iterable[type]) -> dict[str, Schema]:
    """Each model's schema by its class name; a model nested in another is a ``$ref`` to its
    component when it is one of ``models``, else written out where it stands."""
    named = {model.__name__: model for model in models}
    return {name: object_schema(model, named.values()) for name, model in named.items()}


def object_schema(model: type, components: Collection[type] = ()) -> Schema:
    if not is_typeddict(model):
        raise TypeError(f"{model!r} is not a TypedDict")
    hints = typing.get_type_hints(model, include_extras=True)
    properties: Schema = {}
    required: list[str] = []
    for name, hint in hints.items():
        field, optional = _presence(hint, total=getattr(model, "__total__", True))
        properties[name] = schema_of(field, components)
        if not optional:
            required.append(name)
    schema: Schema = {
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": False,
    }
    if model.__doc__:
        # A docstring's line breaks are the source's, not the description's.
        schema["description"] = " ".join(model.__doc__.split())
    return schema


def schema_of(hint: Any, components: Collection[type] = ()) -> Schema:
    """The schema of one annotation (a field's, without ``NotRequired``)."""
    origin = get_origin(hint)
    if origin is Annotated:
        schema = schema_of(hint.__origin__, components)
        for extra in hint.__metadata__:
            if isinstance(extra, Keywords):
                schema.update(extra.values)
        return schema
    if hint is Any:
        return {}
    if hint is None or hint is types.NoneType:
        return {"type": "null"}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is Literal:
        return _literal(get_args(hint))
    if origin is list:
        (item,) = get_args(hint)
        return {"type": "array", "items": schema_of(item, components)}
    if origin is dict:
        key, value = get_args(hint)
        if key is not str:
            raise TypeError(f"a JSON object's keys are strings, not {key!r}")
        schema = {"type": "object"}
        if value is not Any:
            schema["additionalProperties"] = schema_of(value, components)
        return schema
    if origin is Union or origin is types.UnionType:
        return _union(get_args(hint), components)
    if is_typeddict(hint):
        if hint in components:
            return {"$ref": f"#/components/schemas/{hint.__name__}"}
        return object_schema(hint, components)
    raise TypeError(f"no JSON Schema for {hint!r}")


def _presence(hint: Any, *, total: bool) -> tuple[Any, bool]:
    """A field's type without ``Required``/``NotRequired``, and whether the key may be absent."""
    origin = get_origin(hint)
    if origin is Annotated:
        inner, optional = _presence(hint.__origin__, total=total)
        return Annotated[(inner, *hint.__metadata__)], optional
    if origin is NotRequired:
        return get_args(hint)[0], True
    if origin is Required:
        return get_args(hint)[0], False
    return hint, not total


def _literal(values: tuple[Any, ...]) -> Schema:
    kinds = {_LITERAL_TYPES[type(value)] for value in values}
    if len(kinds) != 1:
        raise TypeError(f"a Literal of one JSON type, not {values!r}")
    (kind,) = kinds
    if len(values) == 1:
        return {"type": kind, "const": values[0]}
    return {"type": kind, "enum": list(values)}


def _union(members: tuple[Any, ...], components: Collection[type]) -> Schema:
    """``X | None`` the 3.1 way: a type list when ``X`` has one type, else ``anyOf``."""
    others = [member for member in members if member is not types.NoneType]
    if len(others) != 1 or len(members) != 2:
        raise TypeError(f"a union is X | None, not {' | '.join(map(repr, members))}")
    schema = schema_of(others[0], components)
    if isinstance(schema.get("type"), str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}
