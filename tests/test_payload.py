"""Sidekiq's payload format, with no I/O."""

from __future__ import annotations

import base64
import json
import os
import random
import re

import pytest

from asynctask import payload
from asynctask.errors import InvalidString, PayloadError
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
        ([0, {"b": [b"x"]}], r"args\[1\]\['b'\]\[0\] is a bytes"),
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


def raw_job(**fields: object) -> bytes:
    return json.dumps({"class": "A", "args": [], "jid": "j1"} | fields).encode()


@pytest.mark.parametrize(
    ("raw", "message", "has_job"),
    [
        (b"{not json", "not valid JSON", False),
        (b"[1,2]", "a JSON array, not an object", False),
        (b'"A"', "a JSON string, not an object", False),
        (b'{"args":[],"jid":"j1"}', "no 'class'", True),
        (b'{"class":"A","args":{"a":1},"jid":"j1"}', "'args' must be a list, got a JSON object", True),
        (b"\xff\xfe", "not UTF-8 text", False),
        # A surrogate encoded in UTF-8 (CESU-8) is not UTF-8 either.
        (b'{"class":"\xed\xa0\x80"}', "not UTF-8 text", False),
        (b'\xef\xbb\xbf{"class":"A","args":[],"jid":"j1"}', "byte order mark", False),
        (b'{"class":"A","args":[NaN],"jid":"j1"}', "NaN is not JSON", False),
        (b'{"class":"A","args":[-Infinity],"jid":"j1"}', "-Infinity is not JSON", False),
        (b'{"class":"A","args":[' + b"9" * 5000 + b'],"jid":"j1"}', "not valid JSON", False),
        (raw_job(jid=None), "'jid' must be a printable string, got none", True),
        (raw_job(jid=""), "'jid'", True),
        (raw_job(jid="a\nb"), "'jid'", True),
        (raw_job(jid="\ud800"), "'jid'", True),
        (raw_job(queue=None), "'queue' must be a printable string", True),
        (raw_job(queue="q" * 256), "'queue'", True),
        (raw_job(retry_queue=7), "'retry_queue'", True),
        (raw_job(retry="abc"), "'retry' must be true, false or a non-negative integer, got string 'ab", True),
        (raw_job(retry=-1), "'retry'", True),
        (raw_job(retry=2.0), "'retry'", True),
        (raw_job(retry_count=-2), "'retry_count' must be an integer of -1 or more, got number -2", True),
        (raw_job(retry_count="1"), "'retry_count'", True),
        (raw_job(retry_count=False), "'retry_count'", True),
        (raw_job(at="soon"), "'at' must be an epoch timestamp", True),
        (raw_job(created_at=[1]), "'created_at'", True),
        (raw_job(enqueued_at=True), "'enqueued_at'", True),
    ],
)
def test_loads_explains_what_is_wrong(raw: bytes, message: str, has_job: bool) -> None:
    with pytest.raises(PayloadError, match=re.escape(message)) as info:
        payload.loads(raw)
    assert (info.value.job is not None) is has_job


@pytest.mark.parametrize(
    "fields",
    [
        {"retry": True, "retry_count": 0},
        # Sidekiq's "Retry now" takes one off the count: -1 after a first failure.
        {"retry": 3, "retry_count": -1},
        {"retry": False},
        {"retry": None},
        {"retry": 10**30, "retry_count": 10**30},
        {"queue": "critical", "retry_queue": None, "at": 1, "created_at": 1.5, "enqueued_at": 1795264797802},
        {"jid": "0c6a4ea0-8b4e-4f6e-9d39-1f0e4e0c8f31", "queue": "données"},
        {"backtrace": "yes", "tags": "not a list", "dead": 1, "failed_at": "x", "error_message": 7},
    ],
)
def test_loads_accepts_what_sidekiq_writes_and_what_the_runtime_ignores(fields: dict[str, object]) -> None:
    assert payload.loads(raw_job(**fields))["class"] == "A"


def nested(depth: int, inner: str = "1") -> bytes:
    """A job whose JSON nests ``depth`` levels in all (the job object is the first)."""
    args = "[" * (depth - 1) + inner + "]" * (depth - 1)
    return ('{"class":"A","jid":"j1","args":' + args + "}").encode()


def test_nesting_is_limited_to_100_levels_as_ruby_json_parse_limits_it() -> None:
    assert payload.loads(nested(100))["class"] == "A"
    for depth in (101, 1000, 200_000):
        with pytest.raises(PayloadError, match="nested deeper than 100 levels"):
            payload.loads(nested(depth))
    # Objects count as arrays do; brackets inside strings nest nothing.
    assert payload.loads(nested(50, '{"a":' * 50 + "1" + "}" * 50))["class"] == "A"
    with pytest.raises(PayloadError, match="nested deeper"):
        payload.loads(nested(50, '{"a":' * 51 + "1" + "}" * 51))
    quoted = '"' + "[{" * 500 + '\\"' + "]}" * 300 + '"'
    assert payload.loads(nested(2, f"[{quoted}, {quoted}]"))["args"] == [[json.loads(quoted)] * 2]
    many = "[" + ",".join(["[[1]]"] * 1000) + "]"
    assert len(payload.loads(nested(2, many))["args"][0]) == 1000


def test_the_depth_limit_holds_whatever_the_strings_hold() -> None:
    """Strings full of brackets, quotes and backslashes around nesting of 99 to 102 levels:
    exactly the payloads deeper than 100 are refused."""
    rng = random.Random(7)
    pieces = ["[", "]", "{", "}", '"', "\\", '\\"', "a", "é", "\n"]

    def text() -> str:
        return "".join(rng.choice(pieces) for _ in range(rng.randrange(8)))

    def tree(levels: int) -> object:
        """A value nested exactly ``levels`` deep, with noise around its deepest branch."""
        if levels == 0:
            return text()
        deepest = tree(levels - 1)
        noise = [text(), tree(rng.randrange(min(levels, 4)))]
        if rng.random() < 0.5:
            return [*noise, deepest][:: rng.choice((1, -1))]
        return {text(): noise[0], text() + "k": deepest, "n": noise[1]}

    for _ in range(120):
        depth = rng.randrange(99, 103)
        job = {"class": "A", "jid": "j1", "args": [tree(depth - 2)]}
        raw = json.dumps(job, ensure_ascii=rng.random() < 0.5)
        if depth > 100:
            with pytest.raises(PayloadError, match="nested deeper than 100 levels"):
                payload.loads(raw.encode())
        else:
            assert payload.loads(raw.encode())["class"] == "A"


def test_dumps_storable_writes_lone_surrogates_back_as_escapes() -> None:
    job = payload.loads(b'{"class":"A","jid":"j1","args":["\\ud800 x","\\udfff\xc3\xa9",1e20]}')
    encoded = payload.dumps_storable(job)
    assert encoded == '{"class":"A","jid":"j1","args":["\\ud800 x","\\udfffé",1.0e+20]}'
    # Every store can take it: it encodes as UTF-8, and reads back as the same job.
    assert payload.loads(encoded.encode()) == job
    assert payload.dumps_storable({"args": ["é"]}) == payload.dumps({"args": ["é"]})
    with pytest.raises(ValueError, match="not JSON compliant"):
        payload.dumps_storable(payload.loads(b'{"class":"A","jid":"j1","args":[1e999]}'))


def test_unparseable_keeps_the_original_text_in_a_valid_job() -> None:
    entry = payload.unparseable(b"{oops", "critical", "payload is not valid JSON")
    assert entry["args"] == ["{oops"]
    assert entry["queue"] == "critical"
    assert entry["error_message"] == "payload is not valid JSON"
    assert "payload_base64" not in entry
    assert payload.loads(payload.dumps(entry))["class"] == "AsyncTask::UnparseableJob"


def test_unparseable_keeps_bytes_that_are_not_utf8_in_base64_and_the_jid_given() -> None:
    raw = b'{"class":"\xff","jid":"abc"}'
    entry = payload.unparseable(raw, "q", "payload is not valid UTF-8", payload.valid_jid("abc"))
    assert base64.b64decode(entry["payload_base64"]) == raw
    assert entry["args"] == ['{"class":"\ufffd","jid":"abc"}']
    assert entry["jid"] == "abc"
    assert payload.loads(payload.dumps(entry))["jid"] == "abc"
    assert payload.valid_jid("a\x00") is None and payload.valid_jid(7) is None


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


def _alike_jobs(count: int) -> list[payload.JobDict]:
    """Jobs as one task or bulk push builds them: shared objects but for args and jid."""
    created = 1795264797.8023384
    head = {"retry": True, "queue": "default", "task": "f86a83425dc02d8090c916d1cc55c658"}
    return [
        {**head, "args": [[n]], "class": "Work", "jid": payload.new_jid(), "created_at": created}
        for n in range(count)
    ]


def _odd_ones(jobs: list[payload.JobDict]) -> None:
    """Jobs that differ from the first two where a shared encoding would go wrong."""
    jobs[3]["retry"] = 1  # equal to True, not the same object, and written differently
    jobs[4] = {"queue": jobs[4]["queue"], **{k: v for k, v in jobs[4].items() if k != "queue"}}  # key order
    jobs[5]["args"] = [[1e20, "ünï", 1.5e-07]]  # Ruby's exponent spelling in an own value
    jobs[6]["created_at"] = 1795264797.8023384  # equal, another object: encoded whole, same text
    jobs[7]["extra"] = "field"
    jobs[8]["jid"] = "1e+5 is no float"


def test_alike_jobs_are_encoded_as_each_alone() -> None:
    jobs = _alike_jobs(12)
    _odd_ones(jobs)
    assert payload.dumps_many_within(jobs, 10_000) == [payload.dumps_within(job, 10_000) for job in jobs]
    assert payload.dumps_many_within(jobs, 10_000)[3].startswith('{"retry":1,')


@pytest.mark.parametrize(
    "first_two",
    [
        {"created_at": 1e20},  # a shared float Ruby spells otherwise
        {"args": [[0]]},  # nothing of their own but the jid
    ],
)
def test_alike_jobs_whose_shared_values_need_care_are_encoded_as_each_alone(
    first_two: dict[str, object],
) -> None:
    jobs = _alike_jobs(6)
    for job in jobs[:2]:
        job.update(first_two)
    assert payload.dumps_many_within(jobs, 10_000) == [payload.dumps_within(job, 10_000) for job in jobs]


def test_alike_jobs_are_refused_as_each_alone() -> None:
    jobs = _alike_jobs(6)
    jobs[4]["args"] = [["x" * 500]]
    with pytest.raises(ValueError, match="over the 400-byte limit"):
        payload.dumps_many_within(jobs, 400)
    jobs[4]["args"] = [["\ud800"]]
    with pytest.raises(InvalidString, match=r"args\[0\]\[0\] holds a lone surrogate"):
        payload.dumps_many_within(jobs, 10_000)


def test_a_forked_child_takes_jids_its_parent_does_not() -> None:
    payload.new_jid()  # the parent holds a stock of jids read ahead
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.write(write, " ".join(payload.new_jid() for _ in range(200)).encode())
        finally:
            os._exit(0)
    os.close(write)
    mine = {payload.new_jid() for _ in range(200)}
    with os.fdopen(read) as pipe:
        theirs = set(pipe.read().split())
    os.waitpid(child, 0)
    assert len(theirs) == 200 and not mine & theirs
