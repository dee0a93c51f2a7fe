"""``webapi.typeschema``: the JSON Schema of each kind of field a typed model may have."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, Required, TypedDict

import jsonschema_rs
import pytest

from webapi.typeschema import Keywords, component_schemas, object_schema, schema_of


class Point(TypedDict):
    """A place on the
    plane."""

    x: int
    y: int


class Shape(TypedDict):
    name: Annotated[str, Keywords(minLength=1, description="Its name.")]
    corners: list[Point]
    centre: Point | None
    area: float | None
    closed: bool
    kind: Literal["polygon", "circle"]
    version: Literal[2]
    tags: dict[str, str]
    extra: dict[str, Any]
    drawing: Any
    note: NotRequired[Annotated[str | None, Keywords(description="Said by its author.")]]


class Sketch(TypedDict, total=False):
    title: str
    shape: Required[Shape]


def test_scalars_lists_objects_and_literals() -> None:
    assert schema_of(str) == {"type": "string"}
    assert schema_of(int) == {"type": "integer"}
    assert schema_of(float) == {"type": "number"}
    assert schema_of(bool) == {"type": "boolean"}
    assert schema_of(Any) == {}
    assert schema_of(list[int]) == {"type": "array", "items": {"type": "integer"}}
    assert schema_of(dict[str, Any]) == {"type": "object"}
    assert schema_of(dict[str, int]) == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert schema_of(Literal["on"]) == {"type": "string", "const": "on"}
    assert schema_of(Literal["on", "off"]) == {"type": "string", "enum": ["on", "off"]}
    assert schema_of(Literal[1, 2]) == {"type": "integer", "enum": [1, 2]}


def test_none_makes_a_type_list_or_an_any_of() -> None:
    assert schema_of(int | None) == {"type": ["integer", "null"]}
    assert schema_of(list[str] | None) == {"type": ["array", "null"], "items": {"type": "string"}}
    assert schema_of(Point | None, [Point]) == {
        "anyOf": [{"$ref": "#/components/schemas/Point"}, {"type": "null"}]
    }
    assert schema_of(Any | None) == {"anyOf": [{}, {"type": "null"}]}


def test_keywords_add_to_the_schema_of_the_type_inside_or_outside_a_union() -> None:
    described = Keywords(minimum=0, description="Seconds.")
    expected = {"type": ["number", "null"], "minimum": 0, "description": "Seconds."}
    assert schema_of(Annotated[float | None, described]) == expected
    assert schema_of(Annotated[float, described] | None) == expected
    # Nested Annotated types add up, the outer keyword last.
    seconds = Annotated[float, Keywords(minimum=0, description="Seconds.")]
    assert schema_of(Annotated[seconds, Keywords(description="Left.")]) == {
        "type": "number",
        "minimum": 0,
        "description": "Left.",
    }


def test_a_model_is_a_closed_object_of_its_required_keys() -> None:
    schema = object_schema(Shape)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert list(schema["properties"]) == list(Shape.__annotations__)
    assert schema["required"] == [name for name in Shape.__annotations__ if name != "note"]
    assert "description" not in schema
    assert schema["properties"]["note"] == {"type": ["string", "null"], "description": "Said by its author."}
    # A model not named as a component is written out where it stands, its docstring on one line.
    assert schema["properties"]["centre"] == {
        "type": ["object", "null"],
        "required": ["x", "y"],
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "additionalProperties": False,
        "description": "A place on the plane.",
    }
    assert object_schema(Sketch)["required"] == ["shape"]


def test_components_refer_to_each_other_and_validate() -> None:
    components = component_schemas([Point, Shape])
    assert list(components) == ["Point", "Shape"]
    assert components["Shape"]["properties"]["corners"] == {
        "type": "array",
        "items": {"$ref": "#/components/schemas/Point"},
    }
    validator = jsonschema_rs.validator_for(
        {"$ref": "#/components/schemas/Shape", "components": {"schemas": components}}
    )
    shape = {
        "name": "square",
        "corners": [{"x": 0, "y": 0}],
        "centre": None,
        "area": 1.0,
        "closed": True,
        "kind": "polygon",
        "version": 2,
        "tags": {"colour": "red"},
        "extra": {},
        "drawing": [1, "a"],
    }
    assert validator.is_valid(shape)
    assert validator.is_valid({**shape, "note": None})
    assert not validator.is_valid({**shape, "unknown": 1})
    assert not validator.is_valid({key: value for key, value in shape.items() if key != "closed"})
    assert not validator.is_valid({**shape, "corners": [{"x": 0}]})
    assert not validator.is_valid({**shape, "name": ""})
    assert not validator.is_valid({**shape, "kind": "line"})


@pytest.mark.parametrize(
    "hint",
    [int | str, tuple[int, int], dict[int, str], Literal["a", 1], set[str], Point | Shape | None],
)
def test_types_json_cannot_hold_plainly_are_refused(hint: Any) -> None:
    with pytest.raises(TypeError):
        schema_of(hint)


def test_only_typed_dicts_are_models() -> None:
    with pytest.raises(TypeError, match="not a TypedDict"):
        object_schema(int)
