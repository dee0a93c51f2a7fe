"""A job's flow-control fields as the SQL broker acts on them (docs/guide/flow-control.md names
the payload keys; docs/internals/flow-control-sql.md says what the broker does with them).

The client writes these keys resolved and validated; a payload written by anyone else may
hold anything, so every reader here checks types and treats a field it cannot use as absent
(the job then runs without that control, and the runtime's own check buries what is invalid).
Only payloads that mention a flow key are decoded: an unkeyed job costs one substring test.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from asynctask import payload

#: Longest concurrency key (docs/guide/flow-control.md).
MAX_KEY = 1000
#: Substrings of a payload that may carry a flow field (a cheap test before decoding).
LANE_MARK = b'"concurrency_key"'
UNIQUE_MARK = b'"unique_key"'
RATE_MARK = b'"rate_limit"'
UNTIL_MARK = b'"unique_until"'
#: A rate limit's window by its unit.
WINDOWS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def digest(key: str) -> str:
    """A key's fixed-width name in the tables (any length, any characters)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def storable(key: str) -> str:
    """``key`` as a text column takes it (PostgreSQL refuses NUL; UTF-8 lone surrogates)."""
    if key.isascii() and "\x00" not in key:
        return key
    return key.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")


@dataclass(frozen=True, slots=True)
class LaneOf:
    key: str
    digest: str
    limit: int
    #: ``concurrency_on_failure="continue"``: a failed job frees its slot.
    free_on_failure: bool


@dataclass(frozen=True, slots=True)
class UniqueOf:
    key: str
    digest: str
    #: Seconds from push the key is held at most (a scheduled job's delay not included).
    ttl: float
    #: ``unique_until="start"``: released when claimed, not when the job ends.
    until_start: bool


@dataclass(frozen=True, slots=True)
class RateOf:
    key: str
    digest: str
    count: int
    window: float


def _is_int(value: Any) -> bool:
    return type(value) is int


def lane_of(job: payload.JobDict) -> LaneOf | None:
    key = job.get("concurrency_key")
    if type(key) is not str or not 1 <= len(key) <= MAX_KEY:
        return None
    limit = job.get("concurrency_limit", 1)
    limit = limit if _is_int(limit) and limit >= 1 else 1
    return LaneOf(key, digest(key), min(limit, 2**31 - 1), job.get("concurrency_on_failure") == "continue")


def unique_of(job: payload.JobDict) -> UniqueOf | None:
    key = job.get("unique_key")
    ttl = job.get("unique_for")
    if type(key) is not str or not key or not isinstance(ttl, int | float) or isinstance(ttl, bool):
        return None
    if not 0 < ttl < float("inf"):
        return None
    return UniqueOf(key, digest(key), float(ttl), job.get("unique_until") == "start")


def rate_of(job: payload.JobDict) -> RateOf | None:
    limit = job.get("rate_limit")
    if type(limit) is not str:
        return None
    count, _, unit = limit.partition("/")
    if unit not in WINDOWS or not count.isascii() or not count.isdigit() or int(count) < 1:
        return None
    key = job.get("rate_key", job.get("class"))
    if type(key) is not str or not key:
        return None
    return RateOf(key, digest(key), int(count), WINDOWS[unit])


def decoded(raw: bytes | str, *marks: bytes) -> payload.JobDict | None:
    """The job in ``raw`` if it mentions one of ``marks`` and is a JSON object, else None."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if not any(mark in data for mark in marks):
        return None
    try:
        job = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return job if isinstance(job, dict) else None
