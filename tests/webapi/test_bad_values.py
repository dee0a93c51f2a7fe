"""Values no database can store and bodies over a limit: each is a 4xx with a stable code (never a
500), in every body format and in ``meta`` wherever it is given, and nothing is written."""

from __future__ import annotations

import io
import json
from typing import Any
from urllib.parse import quote

import pytest

from tests.webapi.conftest import LIMITS, Api
from tests.webapi.test_api import assert_nothing_written, error_of

JSON = "application/json"
NDJSON = "application/x-ndjson"
#: The app's max_item_bytes in these tests.
ITEM_BYTES = 2000


@pytest.fixture
def small(make_api: Any) -> Api:
    api: Api = make_api(max_item_bytes=ITEM_BYTES)
    return api


def post(api: Api, data: bytes, content_type: str = JSON, query: str = "") -> Any:
    return api.post(f"/api/tasks{query}", data=data, content_type=content_type)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ('{"job": "echo", "items": [NaN]}', "invalid_number"),
        ('{"job": "echo", "items": [Infinity]}', "invalid_number"),
        ('{"job": "echo", "items": [{"a": [-Infinity]}]}', "invalid_number"),
        ('{"job": "echo", "items": [1e999]}', "invalid_number"),
        ('{"job": "echo", "items": [-1e400]}', "invalid_number"),
        ('{"job": "echo", "items": [1], "meta": {"score": NaN}}', "invalid_number"),
        ('{"job": "echo", "items": [1], "meta": {"score": 1e999}}', "invalid_number"),
        ('{"job": "echo", "items": ["\\ud800"]}', "invalid_string"),
        ('{"job": "echo", "items": [{"\\udfff": 1}]}', "invalid_string"),
        ('{"job": "echo", "items": [1], "meta": {"a": "x\\udc00y"}}', "invalid_string"),
        ('{"job": "echo", "items": [1], "meta": {"\\ud83d": 1}}', "invalid_string"),
        ('{"job": "echo", "items": ["a\\u0000b"]}', "invalid_string"),
    ],
)
def test_unstorable_values_in_a_json_body_are_422(small: Api, body: str, code: str) -> None:
    response = post(small, body.encode())
    assert (response.status_code, error_of(response)["code"]) == (422, code)
    assert_nothing_written(small)


def test_an_integer_longer_than_python_converts_is_422(api: Api) -> None:
    response = post(api, b'{"job": "echo", "items": [' + b"9" * 5000 + b"]}")
    assert (response.status_code, error_of(response)["code"]) == (422, "invalid_number")
    assert_nothing_written(api)


def test_the_bad_string_is_named_with_its_field_and_item(small: Api) -> None:
    error = error_of(post(small, b'{"job": "echo", "items": [1, 2, "\\ud800"]}'))
    assert error["details"] == {"field": "items", "item": 2}
    assert "U+D800" in error["message"]
    error = error_of(post(small, b'{"job": "echo", "items": [1], "meta": {"a": "\\u0000"}}'))
    assert error["details"] == {"field": "meta"}


def test_a_surrogate_pair_and_huge_finite_numbers_are_fine(small: Api) -> None:
    body = '{"job": "echo", "items": ["\\ud83d\\ude00", 1e308, -1e-320, ' + "9" * 300 + "]}"
    response = post(small, body.encode())
    assert response.status_code == 202, response.get_json()


@pytest.mark.parametrize(
    ("line", "code"),
    [(b"NaN", "invalid_number"), (b"[1e999]", "invalid_number"), (b'"\\udbff"', "invalid_string")],
)
def test_unstorable_values_in_ndjson_are_422(small: Api, line: bytes, code: str) -> None:
    response = post(small, b"1\n" + line + b"\n", NDJSON, "?job=echo")
    assert (response.status_code, error_of(response)["code"]) == (422, code)
    assert_nothing_written(small)


def test_a_bad_number_in_ndjson_names_its_line(small: Api) -> None:
    error = error_of(post(small, b"1\n2\n[Infinity]\n", NDJSON, "?job=echo"))
    assert error["details"] == {"line": 3}


def _query_meta(meta: str) -> str:
    return f"?job=echo&meta={quote(meta)}"


@pytest.mark.parametrize(
    ("meta", "code"),
    [
        ('{"a": NaN}', "invalid_number"),
        ('{"a": 1e999}', "invalid_number"),
        ('{"a": "\\ud800"}', "invalid_string"),
        # Meta is level 2, as in a JSON body: 5 more levels pass (max_json_depth 6), 6 do not.
        ('{"a": [[[[[1]]]]]}', "json_too_deep"),
    ],
)
def test_meta_in_the_query_string_has_the_limits_of_meta_in_a_body(small: Api, meta: str, code: str) -> None:
    response = post(small, b"1\n", NDJSON, _query_meta(meta))
    assert (response.status_code, error_of(response)["code"]) == (422, code)
    in_body = post(small, f'{{"job": "echo", "items": [1], "meta": {meta}}}'.encode())
    assert (in_body.status_code, error_of(in_body)["code"]) == (422, code)
    assert_nothing_written(small)


def test_meta_as_deep_as_allowed_is_accepted_in_the_query_string(small: Api) -> None:
    assert LIMITS["max_json_depth"] == 6
    response = post(small, b"1\n", NDJSON, _query_meta('{"a": [[[[1]]]]}'))
    assert response.status_code == 202, response.get_json()


def test_meta_in_a_form_is_checked_like_meta_in_a_body(small: Api) -> None:
    response = small.post(
        "/api/tasks",
        data={"job": "echo", "meta": '{"a": Infinity}', "file": (io.BytesIO(b"1\n"), "rows.ndjson")},
        content_type="multipart/form-data",
    )
    assert (response.status_code, error_of(response)["code"]) == (422, "invalid_number")


# --- one item's size ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "data", "query"),
    [
        (JSON, b'{"job": "echo", "items": [1, "' + b"x" * ITEM_BYTES + b'"]}', ""),
        (JSON, b'{"job": "echo", "items": [[' + b"{}," * ITEM_BYTES + b"{}]]}", ""),
        (JSON, b'{"job": "echo", "items": [1], "meta": {"a": "' + b"x" * ITEM_BYTES + b'"}}', ""),
        (NDJSON, b'1\n"' + b"x" * ITEM_BYTES + b'"\n2\n', "?job=echo"),
        ("text/csv", b"a,b\n1,2\n" + b"x" * ITEM_BYTES + b",1\n", "?job=echo"),
        # A quoted field may span lines: the whole record counts.
        ("text/csv", b'a,b\n1,"' + b"x\n" * ITEM_BYTES + b'",1\n', "?job=echo"),
    ],
)
def test_an_item_longer_than_the_limit_is_413(small: Api, content_type: str, data: bytes, query: str) -> None:
    response = post(small, data, content_type, query)
    assert response.status_code == 413, response.get_json()
    error = error_of(response)
    assert error["code"] == "item_too_large"
    assert (error["details"]["limit"], error["details"]["max"]) == ("max_item_bytes", ITEM_BYTES)
    assert_nothing_written(small)


def test_an_item_just_within_the_limit_is_accepted(small: Api) -> None:
    item = "x" * (ITEM_BYTES - 2)
    response = post(small, json.dumps({"job": "echo", "items": [item]}).encode())
    assert response.status_code == 202, response.get_json()


# --- counting while parsing --------------------------------------------------------------------


def test_items_are_counted_while_read_so_the_rest_of_the_body_is_never_parsed(api: Api) -> None:
    # Past the 51st item comes something that is not JSON: it is never reached.
    over = b'{"job": "echo", "items": [' + b"{}," * (LIMITS["max_items"] + 1) + b"not json at all"
    response = post(api, over)
    assert (response.status_code, error_of(response)["code"]) == (413, "too_many_items")
    lines = b"{}\n" * (LIMITS["max_items"] + 1) + b"{not json\n"
    response = post(api, lines, NDJSON, "?job=echo")
    assert (response.status_code, error_of(response)["code"]) == (413, "too_many_items")
    upload = b"[" + b"{}," * (LIMITS["max_items"] + 1) + b"!"
    response = api.post(
        "/api/tasks",
        data={"job": "echo", "file": (io.BytesIO(upload), "items.json")},
        content_type="multipart/form-data",
    )
    assert (response.status_code, error_of(response)["code"]) == (413, "too_many_items")
    assert_nothing_written(api)


def test_a_body_that_is_an_array_is_refused_at_its_first_character(api: Api) -> None:
    response = post(api, b"[{}, {}, " + b"not json" * 100)
    assert (response.status_code, error_of(response)["code"]) == (422, "invalid_request")


def test_a_field_given_twice_is_refused(api: Api) -> None:
    response = post(api, b'{"job": "echo", "items": [1], "items": [2, 3]}')
    assert (response.status_code, error_of(response)["details"]) == (422, {"field": "items"})
    assert_nothing_written(api)


def test_options_may_follow_the_items(api: Api) -> None:
    response = post(api, b'{"items": [1, 2, 3], "chunk_size": 2, "job": "echo", "meta": {"k": 1}}')
    assert response.status_code == 202, response.get_json()
    assert (response.get_json()["items"], response.get_json()["jobs"]) == (3, 2)
