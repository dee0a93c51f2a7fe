"""Flow-control options of a job: concurrency keys, rate limits and unique jobs.

Options are declared on ``@asynctask.job(...)`` or per push with ``.set(...)``. Keys may be
templates (``"device:{device_id}"``, formatted with the call's arguments bound by name, or
by position as ``{0}``) or callables taking the job's arguments. The client resolves them
at push and writes plain values into the payload (``FIELDS``), so a broker only ever sees
the resolved key of each job.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

#: A key given as a template or as a function of the job's arguments.
KeySpec = str | Callable[..., Any]

#: The payload keys flow control writes (and brokers read).
FIELDS = (
    "concurrency_key",
    "concurrency_limit",
    "concurrency_on_failure",
    "rate_limit",
    "rate_key",
    "unique_key",
    "unique_for",
    "unique_until",
)
#: The longest resolved key, in characters.
MAX_KEY = 1000
#: The most starts a rate limit may allow per window.
MAX_RATE = 1_000_000

_RATE = re.compile(r"([1-9][0-9]*)/([smh])")
_WINDOWS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_rate(value: object) -> tuple[int, float]:
    """``"10/s"`` -> (10, 1.0): starts allowed per window, and the window in seconds."""
    found = _RATE.fullmatch(value) if isinstance(value, str) else None
    if found is None or int(found.group(1)) > MAX_RATE:
        raise ValueError(
            f"rate_limit must look like '10/s', '600/m' or '100/h' (at most {MAX_RATE}), got {value!r}"
        )
    return int(found.group(1)), _WINDOWS[found.group(2)]


@dataclass(frozen=True)
class FlowOptions:
    """A job's flow-control options; None means not set."""

    concurrency_key: KeySpec | None = None
    concurrency_limit: int | None = None
    concurrency_on_failure: Literal["hold", "continue"] | None = None
    rate_limit: str | None = None
    rate_key: KeySpec | None = None
    unique_for: float | None = None
    unique_key: KeySpec | None = None
    unique_until: Literal["start", "done"] | None = None

    @property
    def active(self) -> bool:
        return self.concurrency_key is not None or self.rate_limit is not None or self.unique_for is not None

    def merged(self, overrides: Mapping[str, Any]) -> FlowOptions:
        """These options with those of ``overrides`` that are flow options (None unsets)."""
        known = {name: overrides[name] for name in OPTION_NAMES if name in overrides}
        if not known:
            return self
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return FlowOptions(**{**values, **known}).validated()

    def validated(self) -> FlowOptions:
        """Raise ValueError for options that cannot work, naming the option."""
        for name in ("concurrency_key", "rate_key", "unique_key"):
            spec = getattr(self, name)
            if spec is not None and not (callable(spec) or (isinstance(spec, str) and spec)):
                raise ValueError(f"{name} must be a non-empty template string or a callable")
        limit = self.concurrency_limit
        if limit is not None and (type(limit) is not int or limit < 1):
            raise ValueError(f"concurrency_limit must be a positive integer, got {limit!r}")
        if self.concurrency_on_failure not in (None, "hold", "continue"):
            raise ValueError(
                f"concurrency_on_failure must be 'hold' or 'continue', got {self.concurrency_on_failure!r}"
            )
        if self.concurrency_key is None and (limit is not None or self.concurrency_on_failure is not None):
            raise ValueError("concurrency_limit and concurrency_on_failure need a concurrency_key")
        if self.rate_limit is not None:
            parse_rate(self.rate_limit)
        elif self.rate_key is not None:
            raise ValueError("rate_key needs a rate_limit")
        window = self.unique_for
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int | float) or not window > 0
        ):
            raise ValueError(f"unique_for must be a positive number of seconds, got {window!r}")
        if self.unique_until not in (None, "start", "done"):
            raise ValueError(f"unique_until must be 'start' or 'done', got {self.unique_until!r}")
        if window is None and (self.unique_key is not None or self.unique_until is not None):
            raise ValueError("unique_key and unique_until need unique_for")
        return self

    def payload_fields(
        self, name: str, args: Sequence[Any], signature: inspect.Signature | None = None
    ) -> dict[str, Any]:
        """The payload keys of one push of job ``name`` with ``args``: keys resolved, defaults
        filled in (limit 1, the job's name as rate key, a digest of the args as unique key)."""
        out: dict[str, Any] = {}
        if not self.active:
            return out
        bind = _Binding(args, signature)
        if self.concurrency_key is not None:
            out["concurrency_key"] = _resolve("concurrency_key", self.concurrency_key, bind)
            out["concurrency_limit"] = self.concurrency_limit or 1
            if self.concurrency_on_failure == "continue":
                out["concurrency_on_failure"] = "continue"
        if self.rate_limit is not None:
            out["rate_limit"] = self.rate_limit
            out["rate_key"] = name if self.rate_key is None else _resolve("rate_key", self.rate_key, bind)
        if self.unique_for is not None:
            out["unique_key"] = (
                _args_digest(name, args)
                if self.unique_key is None
                else _resolve("unique_key", self.unique_key, bind)
            )
            out["unique_for"] = self.unique_for
            if self.unique_until == "start":
                out["unique_until"] = "start"
        return out


#: The option names ``job()`` and ``set()`` take (``unique_for`` and so on).
OPTION_NAMES = tuple(f.name for f in fields(FlowOptions))


class _Binding:
    """The call's arguments by position and, when the function is known, by name."""

    def __init__(self, args: Sequence[Any], signature: inspect.Signature | None) -> None:
        self.args = list(args)
        self.named: dict[str, Any] = {}
        if signature is not None:
            bound = signature.bind(*args)
            bound.apply_defaults()
            self.named = dict(bound.arguments)


def _resolve(option: str, spec: KeySpec, bind: _Binding) -> str:
    try:
        value = spec(*bind.args) if callable(spec) else spec.format(*bind.args, **bind.named)
    except (KeyError, IndexError, AttributeError, ValueError, TypeError) as exc:
        raise ValueError(f"{option} {spec!r} cannot be resolved from the job's arguments: {exc!r}") from None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value or len(value) > MAX_KEY:
        raise ValueError(f"{option} must resolve to a string of 1 to {MAX_KEY} characters, got {value!r}")
    return value


def _args_digest(name: str, args: Sequence[Any]) -> str:
    canonical = json.dumps(list(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{name}:{hashlib.sha256(canonical.encode('utf-8', 'surrogatepass')).hexdigest()}"


def check_fields(job: dict[str, Any]) -> str | None:
    """What is wrong with the flow-control keys of a stored payload, or None: brokers act on
    them, so a payload whose keys they cannot act on is not a job they can run."""
    get = job.get
    key = get("concurrency_key")
    if key is not None:
        if not _is_key(key):
            return f"'concurrency_key' must be a string of 1 to {MAX_KEY} characters"
        limit = get("concurrency_limit", 1)
        if type(limit) is not int or limit < 1:
            return "'concurrency_limit' must be a positive integer"
        if get("concurrency_on_failure", "hold") not in ("hold", "continue"):
            return "'concurrency_on_failure' must be 'hold' or 'continue'"
    rate = get("rate_limit")
    if rate is not None:
        try:
            parse_rate(rate)
        except ValueError as exc:
            return str(exc)
        if not _is_key(get("rate_key", "")):
            return f"'rate_key' must be a string of 1 to {MAX_KEY} characters"
    unique = get("unique_key")
    if unique is not None:
        if not _is_key(unique):
            return f"'unique_key' must be a string of 1 to {MAX_KEY} characters"
        window = get("unique_for")
        if isinstance(window, bool) or not isinstance(window, int | float) or not window > 0:
            return "'unique_for' must be a positive number of seconds"
        if get("unique_until", "done") not in ("start", "done"):
            return "'unique_until' must be 'start' or 'done'"
    return None


def _is_key(value: object) -> bool:
    return type(value) is str and 0 < len(value) <= MAX_KEY
