"""``JsonReader``: a JSON document read one value at a time must give exactly what ``json.loads``
gives, wherever the stream's reads happen to cut the text, and hold one value in memory."""

from __future__ import annotations

import io
import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webapi import jsonreader
from webapi.errors import ApiError
from webapi.jsonreader import JsonReader

DEPTH = 32


class Trickle(io.RawIOBase):
    """A stream that gives at most ``step`` bytes a read, as a slow socket does."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data = io.BytesIO(data)
        self._step = step

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._data.read(self._step if size < 0 else min(size, self._step))


def read_body(data: bytes, step: int, max_chars: int = 10**6) -> dict[str, Any]:
    reader = JsonReader(Trickle(data, step), max_depth=DEPTH, max_value_chars=max_chars)
    assert reader.begin_object()
    found: dict[str, Any] = {}
    first = True
    while (key := reader.next_key(first)) is not None:
        first = False
        found[key] = list(reader.items(2)) if key == "items" else reader.value(2)
    reader.end()
    return found


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)
bodies = st.fixed_dictionaries(
    {"items": st.lists(values, max_size=6)}, optional={"job": values, "meta": values, "queue": values}
)


@pytest.fixture
def tiny_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    # Reads of a few bytes: every value, string, number and escape gets cut somewhere.
    monkeypatch.setattr(jsonreader, "READ_SIZE", 3)


@settings(max_examples=300, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies, step=st.integers(1, 9), ascii_only=st.booleans(), indent=st.sampled_from([None, 1]))
def test_any_body_reads_as_json_loads_reads_it(
    tiny_reads: None, body: dict[str, Any], step: int, ascii_only: bool, indent: int | None
) -> None:
    text = json.dumps(body, ensure_ascii=ascii_only, indent=indent).encode()
    assert read_body(text, step) == json.loads(text)


@settings(max_examples=300, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies, cut=st.floats(0, 1, exclude_max=True), step=st.integers(1, 9))
def test_a_body_cut_short_is_invalid_json(
    tiny_reads: None, body: dict[str, Any], cut: float, step: int
) -> None:
    text = json.dumps(body).encode()
    with pytest.raises(ApiError) as raised:
        read_body(text[: max(1, int(len(text) * cut))], step)
    assert (raised.value.status, raised.value.code) == (400, "invalid_json")


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('{"items": [NaN]}', "invalid_number"),
        ('{"items": [1, -Infinity]}', "invalid_number"),
        ('{"items": [1.5e309]}', "invalid_number"),
        ('{"items": [' + "[" * DEPTH + "]" * DEPTH + "]}", "json_too_deep"),
        ('{"items": [' + "[" * 5000, "json_too_deep"),
        ('{"items": ["' + "x" * 200 + '"]}', "item_too_large"),
        ('{"items": [[' + "{}," * 200 + "{}]]}", "item_too_large"),
        ('{"items": [1, 2,]}', "invalid_json"),
        ('{"items": [1]} 2', "invalid_json"),
        ('{"items": [tru]}', "invalid_json"),
        ('{"items": [1] "meta": 2}', "invalid_json"),
    ],
)
def test_errors_are_found_wherever_the_reads_cut(tiny_reads: None, text: str, code: str) -> None:
    for step in (1, 2, 7, 64):
        with pytest.raises(ApiError) as raised:
            read_body(text.encode(), step, max_chars=100)
        assert raised.value.code == code, (step, raised.value.message)


def test_reading_items_holds_one_item_in_memory() -> None:
    count = 50_000
    data = b'{"items": [' + b",".join([b'{"sku": "ABC-1", "tags": [1, 2, 3]}'] * count) + b"]}"
    reader = JsonReader(io.BytesIO(data), max_depth=DEPTH, max_value_chars=10**6)
    assert reader.begin_object() and reader.next_key(True) == "items"
    tracemalloc.start()
    try:
        seen = sum(1 for _ in reader.items(2))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == count
    # The body is 1.8 MB, and parsed whole it takes about 18 MB: the reader holds one read's text.
    assert peak < 1_000_000, peak
