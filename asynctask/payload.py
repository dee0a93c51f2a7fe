"""Sidekiq's job JSON, byte for byte, with no I/O.

A job is a plain ``dict`` whose key order is the order Ruby's ``JSON.generate`` would emit:
``retry``, ``queue``, job options, ``args``/``class``, ``jid``, ``created_at``, ``enqueued_at``.
Timestamps are float epoch seconds as Sidekiq 6.x and 7.x write them; Sidekiq 8's integer
milliseconds are understood on read.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import secrets
import time
import zlib
from collections.abc import Mapping
from typing import Any

from asynctask.errors import PayloadError

#: A decoded job payload.
JobDict = dict[str, Any]

#: Sidekiq 8 writes integer epoch milliseconds; anything above this is milliseconds, below it seconds.
_MILLISECONDS_THRESHOLD = 100_000_000_000

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
#: A digit followed by an exponent, as Python prints 1e+20; only then is the slow encoder needed.
_BARE_EXPONENT = re.compile(r"[0-9]e[+-]")


def new_jid() -> str:
    """24 lowercase hex characters, like Ruby's ``SecureRandom.hex(12)``."""
    return secrets.token_hex(12)


def new_jids(count: int) -> list[str]:
    """``count`` jids from one read of the system's random source (bulk task creation)."""
    raw = os.urandom(12 * count).hex()
    return [raw[start : start + 24] for start in range(0, 24 * count, 24)]


def now() -> float:
    return time.time()


def dumps(job: Mapping[str, Any]) -> str:
    """Compact JSON with raw UTF-8, as Ruby's ``JSON.generate`` writes it."""
    encoded = _encoder.encode(job)
    if _BARE_EXPONENT.search(encoded) is None:
        return encoded
    # Rare: a float in exponent form (or a string that looks like one). Re-encode with Ruby's
    # float spelling, which the C encoder cannot be told to use.
    return "".join(_ruby_float_iterencode(job, 0))


def schedule(job: JobDict, at: float | None, now: float) -> float | None:
    """Sidekiq's rule for a pushed job: with a run-at time in the future it waits in the
    schedule, without ``enqueued_at`` (as Sidekiq >= 7.1.2 writes it), and that time is
    returned; otherwise it is enqueued ``now`` (None)."""
    if at is not None and at > now:
        job.pop("enqueued_at", None)
        return at
    job["enqueued_at"] = now
    return None


def dumps_within(job: Mapping[str, Any], limit: int) -> str:
    """``dumps``, refusing (ValueError) a job whose UTF-8 payload is over ``limit`` bytes."""
    encoded = dumps(job)
    # Characters bound the UTF-8 size from below; encode only when it might matter.
    if len(encoded) * 4 > limit and len(encoded.encode()) > limit:
        raise ValueError(
            f"job {job.get('class')} is {len(encoded.encode())} bytes, over the {limit}-byte limit "
            "(max_payload_bytes); pass references to data, not the data"
        )
    return encoded


def _ruby_float(value: float) -> str:
    """Ruby's ``Float#to_s``: Python's shortest repr, but ``1.0e+20`` where Python writes ``1e+20``."""
    if not math.isfinite(value):
        raise ValueError(f"{value!r} cannot be written as JSON")
    text = float.__repr__(value)
    mantissa, exponent_mark, exponent = text.partition("e")
    if exponent_mark and "." not in mantissa:
        return f"{mantissa}.0e{exponent}"
    return text


# The pure-Python encoder of the json module, with Ruby's float spelling plugged in. No
# circular-reference markers: they would be shared by threads, and payloads are JSON trees.
_ruby_float_iterencode = json.encoder._make_iterencode(  # type: ignore[attr-defined]
    None,
    _encoder.default,
    json.encoder.encode_basestring,
    None,
    _ruby_float,
    ":",
    ",",
    False,
    False,
    True,
)


def loads(raw: bytes | str) -> JobDict:
    """Decode a payload read from a queue or sorted set; raise PayloadError if it is not a job."""
    try:
        job = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PayloadError(f"payload is not valid JSON: {exc}") from None
    if not isinstance(job, dict):
        raise PayloadError(f"payload is a JSON {type(job).__name__}, not an object")
    if not isinstance(job.get("class"), str) or not job["class"]:
        raise PayloadError("payload has no 'class' string", job)
    if not isinstance(job.get("args"), list):
        raise PayloadError(f"payload 'args' must be a list, got {type(job.get('args')).__name__}", job)
    return job


def unparseable(raw: bytes, queue: str, reason: str) -> JobDict:
    """A dead-set entry for bytes that are not a job: the original text kept as its only arg."""
    stamp = now()
    return {
        "retry": False,
        "queue": queue,
        "class": "AsyncTask::UnparseableJob",
        "args": [raw.decode("utf-8", errors="replace")],
        "jid": new_jid(),
        "created_at": stamp,
        "enqueued_at": stamp,
        "error_message": reason,
        "error_class": "asynctask.PayloadError",
        "failed_at": stamp,
        "retry_count": 0,
    }


def timestamp(value: Any) -> float | None:
    """Epoch seconds from a Sidekiq timestamp: float seconds (6.x/7.x) or integer ms (8.x)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = float(value)
    return seconds / 1000.0 if seconds > _MILLISECONDS_THRESHOLD else seconds


def check_args(args: Any) -> list[Any]:
    """Return ``args`` if it is a list of JSON-native values; raise TypeError naming the culprit.

    JSON-native means what survives a JSON round trip unchanged: str, int, finite float, bool,
    None, lists and str-keyed dicts of those. Tuples, sets, bytes, dates and objects are refused
    here rather than silently changed on the way to Redis.
    """
    if not isinstance(args, list):
        raise TypeError(f"job args must be a list, got {type(args).__name__}")
    _check_value(args, "args")
    return args


def _check_value(value: Any, path: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{path} is {value!r}, which JSON cannot represent")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_value(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{path} has a {type(key).__name__} key {key!r}; JSON object keys must be str"
                )
            _check_value(item, f"{path}[{key!r}]")
        return
    raise TypeError(
        f"{path} is a {type(value).__name__}, which is not JSON-native "
        "(use str, int, float, bool, None, list or dict with str keys)"
    )


def compress_backtrace(lines: list[str]) -> str:
    """Base64(zlib(JSON lines)), wrapped every 60 characters as Ruby's ``encode64`` (Sidekiq 6.x)."""
    encoded = base64.b64encode(zlib.compress(json.dumps(lines, separators=(",", ":")).encode()))
    return "".join(encoded[i : i + 60].decode() + "\n" for i in range(0, len(encoded), 60))


def decompress_backtrace(value: str) -> list[str]:
    """Read either Base64 flavour (6.x wrapped, 7.2.1+ strict)."""
    lines: list[str] = json.loads(zlib.decompress(base64.b64decode(value)))
    return lines
