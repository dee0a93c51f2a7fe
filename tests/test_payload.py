"""Sidekiq's payload format, with no I/O."""

from __future__ import annotations

import re

import pytest

from asynctask import payload
from asynctask.errors import PayloadError
from asynctask.worker.retry import default_delay


def test_jid_is_24_lowercase_hex() -> None:
    jids = {payload.new_jid() for _ in range(100)}
    assert len(jids) == 100
    assert all(re.fullmatch(r"[0-9a-f]{24}", jid) for jid in jids)


def test_dumps_is_compact_raw_utf8_with_key_order_kept() -> None:
    job = {
        "retry": True,
        "queue": "default",
        "args": [1, "ünï", {"k": "v/w"}, None, 1.5],
        "class": "PlainJob",
    }
    assert payload.dumps(job) == (
        '{"retry":true,"queue":"default","args":[1,"ünï",{"k":"v/w"},null,1.5],"class":"PlainJob"}'
    )


def test_epoch_floats_print_as_ruby_prints_them() -> None:
    # Captured from Sidekiq 6.4.1: created_at 1795264797.8023384
    assert payload.dumps({"created_at": 1795264797.8023384}) == '{"created_at":1795264797.8023384}'


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1, 2), "must be a list"),
        ([(1, 2)], r"args\[0\] is a tuple"),
        ([{1: "a"}], "int key 1"),
        ([float("nan")], "nan"),
        ([{"a": [b"x"]}], r"args\[0\]\['a'\]\[0\] is a bytes"),
        ([{1, 2}], "is a set"),
        ([object()], "is a object"),
    ],
)
def test_check_args_refuses_what_json_would_change(args: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        payload.check_args(args)


def test_check_args_accepts_json_native_values() -> None:
    args = [1, -2.5, "s", True, None, [1, [2]], {"a": {"b": [None]}}]
    assert payload.check_args(args) is args


def test_timestamp_reads_float_seconds_and_sidekiq8_milliseconds() -> None:
    assert payload.timestamp(1795264797.8023384) == 1795264797.8023384
    assert payload.timestamp(1795264797802) == pytest.approx(1795264797.802)
    assert payload.timestamp(1795264797) == 1795264797.0
    assert payload.timestamp("1795264797") is None
    assert payload.timestamp(True) is None


@pytest.mark.parametrize(
    ("raw", "message", "has_job"),
    [
        (b"{not json", "not valid JSON", False),
        (b"[1,2]", "JSON list", False),
        (b'{"args":[]}', "no 'class'", True),
        (b'{"class":"A","args":{"a":1}}', "'args' must be a list, got dict", True),
        (b"\xff\xfe", "not valid JSON", False),
    ],
)
def test_loads_explains_what_is_wrong(raw: bytes, message: str, has_job: bool) -> None:
    with pytest.raises(PayloadError, match=message) as info:
        payload.loads(raw)
    assert (info.value.job is not None) is has_job


def test_unparseable_keeps_the_original_text_in_a_valid_job() -> None:
    entry = payload.unparseable(b"{oops", "critical", "payload is not valid JSON")
    assert entry["args"] == ["{oops"]
    assert entry["queue"] == "critical"
    assert entry["error_message"] == "payload is not valid JSON"
    assert payload.loads(payload.dumps(entry))["class"] == "AsyncTask::UnparseableJob"


def test_backtrace_is_ruby_encode64_of_zlib_json() -> None:
    lines = [f"app/jobs/x.py:{n}:in `f'" for n in range(40)]
    encoded = payload.compress_backtrace(lines)
    # Ruby's Base64.encode64: 60 characters a line, each ending in a newline.
    assert encoded.endswith("\n")
    assert all(len(line) <= 60 for line in encoded.splitlines())
    assert len(encoded.splitlines()[0]) == 60
    assert payload.decompress_backtrace(encoded) == lines
    assert payload.decompress_backtrace(encoded.replace("\n", "")) == lines


def test_default_backoff_matches_sidekiq() -> None:
    for count in (0, 1, 5, 24):
        delays = {default_delay(count) for _ in range(300)}
        base = count**4 + 15
        assert min(delays) >= base
        assert max(delays) <= base + 9 * (count + 1)
        assert all((d - base) % (count + 1) == 0 for d in delays)


def test_exponent_floats_are_spelled_as_ruby_spells_them() -> None:
    encoded = payload.dumps({"args": [1e20, 1e-05, 1.5e-07, 2.0, 1e15, 0.0001, "1e+5 stays text"]})
    assert encoded == '{"args":[1.0e+20,1.0e-05,1.5e-07,2.0,1000000000000000.0,0.0001,"1e+5 stays text"]}'
    with pytest.raises(ValueError, match="not JSON compliant"):
        payload.dumps({"args": [1e20, float("inf")]})
