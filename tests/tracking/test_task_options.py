"""``TaskOptions``: one value, checked once, whether a task's options come from Python, JSON or text."""

from __future__ import annotations

import typing
from dataclasses import fields
from typing import Any

import pytest

from asynctask import InvalidString, TaskOptionError, TaskOptions
from asynctask.feeds import Feed
from asynctask.tasks.itemkeys import TemplateError
from asynctask.tasks.options import MAX_CONCURRENCY_LIMIT, TaskFields
from webapi.formats import BODY_FIELDS
from webapi.openapi import document

#: Values no task can have, the option each is refused for, whichever way it comes.
BAD = [
    ({"chunk_size": 0}, "chunk_size"),
    ({"chunk_size": True}, "chunk_size"),
    ({"chunk_size": "2"}, "chunk_size"),
    ({"chunk_size": 1.5}, "chunk_size"),
    ({"concurrency_key": 7}, "concurrency_key"),
    ({"concurrency_key": "k", "concurrency_limit": 0}, "concurrency_limit"),
    ({"concurrency_key": "k", "concurrency_limit": MAX_CONCURRENCY_LIMIT + 1}, "concurrency_limit"),
    ({"concurrency_key": "k", "concurrency_on_failure": "skip"}, "concurrency_on_failure"),
    ({"concurrency_limit": 2}, "concurrency_limit"),
    ({"concurrency_on_failure": "continue"}, "concurrency_on_failure"),
    ({"parallel": 0}, "parallel"),
    ({"parallel": 2, "interval": -1}, "interval"),
    ({"parallel": 2, "interval": float("inf")}, "interval"),
    ({"parallel": 2, "interval": float("nan")}, "interval"),
    ({"parallel": 2, "priority": 2**31}, "priority"),
    ({"interval": 1}, "interval"),
    ({"priority": 1}, "priority"),
    ({"meta": [1]}, "meta"),
]


@pytest.mark.parametrize(("given", "field"), BAD)
def test_a_bad_option_is_refused_alike_from_python_and_from_json(given: dict[str, Any], field: str) -> None:
    with pytest.raises(TaskOptionError) as from_python:
        TaskOptions(**given)
    with pytest.raises(TaskOptionError) as from_json:
        TaskOptions.from_json(given)
    assert from_python.value.field == from_json.value.field == field
    assert str(from_python.value) == str(from_json.value)


def test_json_numbers_that_are_integers_are_read_as_integers() -> None:
    options = TaskOptions.from_json({"chunk_size": 2.0, "parallel": 3.0, "interval": 1, "priority": -1.0})
    assert (options.chunk_size, options.parallel, options.interval, options.priority) == (2, 3, 1, -1)
    assert type(options.chunk_size) is int and type(options.parallel) is int


def test_an_option_with_a_default_is_never_none() -> None:
    with pytest.raises(TaskOptionError, match="chunk_size must be an integer") as refused:
        TaskOptions(chunk_size=None)
    assert refused.value.field == "chunk_size"


def test_json_may_give_null_only_where_it_means_not_given() -> None:
    assert TaskOptions.from_json({"queue": None, "meta": None}) == TaskOptions()
    for name in ("chunk_size", "concurrency_key", "parallel"):
        with pytest.raises(TaskOptionError, match="may not be null") as refused:
            TaskOptions.from_json({name: None})
        assert refused.value.field == name


def test_a_request_names_only_known_options_and_only_safe_queues() -> None:
    with pytest.raises(TaskOptionError, match="unknown field 'tenant'"):
        TaskOptions.from_json({"tenant": "other"})
    with pytest.raises(TaskOptionError, match="queue must be 1 to 100 letters") as refused:
        TaskOptions.from_json({"queue": "a b"})
    assert refused.value.field == "queue"
    # From Python a queue follows the payload's rule for names, checked when the jobs are made.
    assert TaskOptions(queue="a b").queue == "a b"


def test_text_reads_as_the_json_it_stands_for() -> None:
    objects: list[tuple[str, str]] = []

    def read_object(name: str, text: str) -> Any:
        objects.append((name, text))
        return {"read": text}

    options = TaskOptions.from_text(
        {
            "chunk_size": "10",
            "parallel": "2",
            "interval": "0.5",
            "priority": "-3",
            "meta": "{}",
            "queue": "q",
        },
        tenant="acme",
        read_object=read_object,
    )
    assert options == TaskOptions(
        chunk_size=10, parallel=2, interval=0.5, priority=-3, meta={"read": "{}"}, queue="q", tenant="acme"
    )
    assert objects == [("meta", "{}")]
    for name, text in [
        ("chunk_size", "1_000"),
        ("chunk_size", " 3"),
        ("parallel", "١٢"),
        ("interval", "inf"),
    ]:
        with pytest.raises(TaskOptionError) as refused:
            TaskOptions.from_text({name: text}, read_object=read_object)
        assert refused.value.field == name


def test_the_feed_and_the_keys_are_what_the_options_say() -> None:
    assert TaskOptions().feed is None
    assert TaskOptions(parallel=3).feed == Feed(parallel=3, interval=0.0, priority=0)
    assert TaskOptions(parallel=3, interval=2, priority=-1).feed == Feed(
        parallel=3, interval=2.0, priority=-1
    )
    assert TaskOptions().item_key is None
    keyed = TaskOptions(concurrency_key="op:{op}", tenant="acme")
    assert keyed.item_key is not None and keyed.item_key({"op": 7}) == '"acme"/op:7'
    assert (keyed.key_limit, keyed.key_on_failure) == (1, "hold")
    with pytest.raises(TemplateError):
        TaskOptions(concurrency_key="op:{op.real}")
    with pytest.raises(InvalidString, match="concurrency_key holds a NUL"):
        TaskOptions(concurrency_key="k\x00")
    with pytest.raises(InvalidString, match=r"meta\['note'\] holds a NUL"):
        TaskOptions(meta={"note": "\x00"})


def test_keyword_arguments_go_on_top_of_a_value() -> None:
    base = TaskOptions(chunk_size=5, parallel=2)
    assert base.merged({}) is base
    assert base.merged({"parallel": 4, "tenant": "acme"}) == TaskOptions(
        chunk_size=5, parallel=4, tenant="acme"
    )
    with pytest.raises(TaskOptionError):
        base.merged({"parallel": 0})


def test_every_option_is_a_keyword_argument_and_a_request_field() -> None:
    names = {option.name for option in fields(TaskOptions)}
    assert set(typing.get_type_hints(TaskFields)) == names
    assert set(TaskOptions.request_fields()) == names - {"tenant"}
    assert BODY_FIELDS == {"job", "items", *TaskOptions.request_fields()}


def test_the_api_documents_every_option_from_its_definition() -> None:
    doc = document()
    schemas = doc["components"]["schemas"]
    submission, upload = schemas["TaskSubmission"], schemas["TaskUpload"]
    for name, schema in TaskOptions.request_schema().items():
        kind = [schema["type"], "null"] if name in TaskOptions.nullable() else schema["type"]
        assert submission["properties"][name]["type"] == kind, name
        assert name in upload["properties"], name
        assert name not in submission["required"] and name not in upload["required"], name
    needs = {name: [needed] for name, needed in TaskOptions.needs().items()}
    assert submission["dependentRequired"] == upload["dependentRequired"] == needs
    query = {p["name"] for p in doc["paths"]["/api/tasks"]["post"]["parameters"]}
    assert query == {"job", *TaskOptions.request_fields()}
