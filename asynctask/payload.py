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
import operator
import os
import re
import reprlib
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from json.scanner import make_scanner
from typing import Any, NoReturn

from asynctask import storable
from asynctask.errors import InvalidName, PayloadError
from asynctask.flow.options import check_fields

#: A decoded job payload.
JobDict = dict[str, Any]
#: Jobs to push, each with the time it is to run at (None: now).
PushEntries = Sequence[tuple[JobDict, float | None]]

#: Sidekiq 8 writes integer epoch milliseconds; anything above this is milliseconds, below it seconds.
_MILLISECONDS_THRESHOLD = 100_000_000_000

#: The deepest nesting of arrays and objects a payload may have: Ruby's ``JSON.parse``
#: default (``max_nesting``), so AsyncTask and Sidekiq read the same payloads.
MAX_DEPTH = 100
#: The longest queue name: the SQL broker's ``queue`` column.
MAX_QUEUE = 255
#: The longest jid (Sidekiq's are 24 characters; other clients use UUIDs).
MAX_JID = 255
#: The longest jid this client gives a job: what every store's jid column holds.
MAX_CLIENT_JID = 64
#: The longest job class name: the tracking tables' ``job_name``.
MAX_CLASS = 255

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def c_encoder(*, allow_nan: bool, compact: bool = True, ensure_ascii: bool = False) -> Callable[[Any], str]:
    """The C half of a ``JSONEncoder``, built once by the caller: ``JSONEncoder.encode`` (and
    ``json.dumps``) builds it again for every call, a third of the cost of encoding a job.
    ``compact``: no spaces after separators (else ``json.dumps``'s spelling). No
    circular-reference markers: payloads, transitions and job arguments are JSON trees."""
    encode_chunks = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None,
        _encoder.default,
        json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring,
        None,
        ":" if compact else ": ",
        "," if compact else ", ",
        False,
        False,
        allow_nan,
    )

    def encode(value: Any) -> str:
        return "".join(encode_chunks(value, 0))

    return encode


_encode = c_encoder(allow_nan=False)
_encode_string: Callable[[str], str] = json.encoder.encode_basestring
#: A digit followed by an exponent, as Python prints 1e+20; only then is the slow encoder needed.
_BARE_EXPONENT = re.compile(r"[0-9]e[+-]")


def new_jid() -> str:
    """24 lowercase hex characters, like Ruby's ``SecureRandom.hex(12)``.

    Taken from a stock read from the system's random source ``JIDS_PER_READ`` at a time, not
    with a system call per job. A forked child drops the stock it inherited, which its parent
    goes on taking from.
    """
    while True:
        try:
            return _spare_jids.pop()
        except IndexError:
            _spare_jids.extend(new_jids(JIDS_PER_READ))


#: Jids read from the system's random source at once for ``new_jid``.
JIDS_PER_READ = 64
_spare_jids: list[str] = []
os.register_at_fork(after_in_child=_spare_jids.clear)


def new_jids(count: int) -> list[str]:
    """``count`` jids from one read of the system's random source (bulk task creation)."""
    raw = os.urandom(12 * count).hex()
    return [raw[start : start + 24] for start in range(0, 24 * count, 24)]


def now() -> float:
    return time.time()


def dumps(job: Mapping[str, Any]) -> str:
    """Compact JSON with raw UTF-8, as Ruby's ``JSON.generate`` writes it."""
    encoded = _encode(job)
    # Two substring scans cost less than one search of the pattern, and nearly always settle it.
    if ("e+" not in encoded and "e-" not in encoded) or _BARE_EXPONENT.search(encoded) is None:
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
    """``dumps``, refusing (ValueError) a job whose UTF-8 payload is over ``limit`` bytes, and
    (InvalidString) one holding a lone surrogate, which no UTF-8 encodes."""
    return _within(job, dumps(job), limit)


def _within(job: Mapping[str, Any], encoded: str, limit: int) -> str:
    """``encoded`` (the text of ``job``), refused as ``dumps_within`` says."""
    # isascii() reads a flag of the string: only a payload with other characters is searched.
    if not encoded.isascii() and _SURROGATE.search(encoded) is not None:
        _refuse_surrogate(job)
    # Characters bound the UTF-8 size from below; encode only when it might matter.
    if len(encoded) * 4 > limit and len(encoded.encode()) > limit:
        raise ValueError(
            f"job {job.get('class')} is {len(encoded.encode())} bytes, over the {limit}-byte limit "
            "(max_payload_bytes); pass references to data, not the data"
        )
    return encoded


_SURROGATE = re.compile("[\ud800-\udfff]")
#: Fewer jobs than this are encoded one by one: finding what they share would cost more.
_ALIKE_FROM = 4


def dumps_many_within(jobs: Sequence[Mapping[str, Any]], limit: int) -> list[str]:
    """``dumps_within`` of each of ``jobs``, the same text, faster when they are alike.

    The jobs of one bulk push or one task hold the same objects for most of their fields
    (queue, class, options, the times, the task); only args and jid differ. When the first two
    jobs have the same keys in the same order, the values both hold (the same objects) are
    encoded once, between the texts of the values of their own: a job whose keys and shared
    values match is then two or three small encodings and a join, against a whole encoding
    (which the C encoder does at about 100 ns per field). A job that does not match is encoded
    whole."""
    alike = _Alike.of(jobs[0], jobs[1]) if len(jobs) >= _ALIKE_FROM else None
    if alike is None:
        return [dumps_within(job, limit) for job in jobs]
    return [alike.dumps_within(job, limit) for job in jobs]


class _Alike:
    """The text of what alike jobs share, and the keys of the values each job encodes."""

    def __init__(self, keys: tuple[str, ...], shared: dict[str, Any], texts: list[str]) -> None:
        self.keys = keys
        self.shared_of = operator.itemgetter(*shared)
        self.shared_values = self.shared_of(shared)
        own = [key for key in keys if key not in shared]
        #: A tuple of the job's own values, however many there are.
        self.own_of: Callable[[Mapping[str, Any]], tuple[Any, ...]] = (
            operator.itemgetter(*own) if len(own) > 1 else lambda job: (job[own[0]],)
        )
        #: ``texts[i]`` comes before own value ``i``; the last one ends the object.
        self.texts = texts[:-1]
        self.end = texts[-1]

    @classmethod
    def of(cls, first: Mapping[str, Any], second: Mapping[str, Any]) -> _Alike | None:
        keys = tuple(first)
        if tuple(second) != keys or not all(type(key) is str for key in keys):
            return None
        shared = {key: first[key] for key in keys if first[key] is second[key]}
        if len(shared) < 2 or len(shared) == len(keys):
            return None
        texts: list[str] = []
        text = "{"
        for key in keys:
            if text != "{":
                text += ","
            text += _encode(key) + ":"
            if key in shared:
                text += _encode(shared[key])
            else:
                texts.append(text)
                text = ""
        texts.append(text + "}")
        if any(_BARE_EXPONENT.search(text) for text in texts):
            # A shared float in exponent form: ``dumps`` spells it Ruby's way, job by job.
            return None
        return cls(keys, shared, texts)

    def dumps_within(self, job: Mapping[str, Any], limit: int) -> str:
        if tuple(job) != self.keys or not all(map(operator.is_, self.shared_of(job), self.shared_values)):
            return dumps_within(job, limit)
        parts: list[str] = []
        for text, value in zip(self.texts, self.own_of(job), strict=True):
            parts.append(text)
            if type(value) is str:
                # A jid: the string encoder alone, without the whole encoder's set-up.
                parts.append(_encode_string(value))
                continue
            own = _encode(value)
            if ("e+" in own or "e-" in own) and _BARE_EXPONENT.search(own) is not None:
                # As ``dumps``: a float in exponent form takes Ruby's spelling.
                return dumps_within(job, limit)
            parts.append(own)
        parts.append(self.end)
        return _within(job, "".join(parts), limit)


def _refuse_surrogate(job: Mapping[str, Any]) -> None:
    """Raise ``InvalidString`` naming where the lone surrogate is: in the args, else elsewhere
    in the job."""
    storable.check(job.get("args"), "args")
    storable.check(dict(job), "job")


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
    """Decode a payload read from a queue or sorted set; raise PayloadError if it is not a job.

    A payload is UTF-8 JSON text (no byte order mark) of an object, nested at most
    ``MAX_DEPTH`` levels, without NaN or Infinity (as Ruby's ``JSON.parse`` reads it), whose
    fields the runtime reads have the types Sidekiq gives them (``check_job``).
    """
    try:
        text = raw if isinstance(raw, str) else raw.decode()
    except UnicodeDecodeError as exc:
        raise PayloadError(f"payload is not valid JSON: it is not UTF-8 text ({exc})") from None
    try:
        job = _decode(text)
    except ValueError as exc:
        raise PayloadError(_not_json(text, exc)) from None
    except RecursionError:
        raise PayloadError(_TOO_DEEP) from None
    encoded = raw if isinstance(raw, bytes) else text.encode("utf-8", "surrogatepass")
    # Only a payload with more brackets than the limit can be nested deeper than it: a count,
    # far cheaper than the decoding, spares most payloads the exact measure.
    if _more_brackets_than(encoded, MAX_DEPTH) and _nested_deeper(encoded, MAX_DEPTH):
        raise PayloadError(_TOO_DEEP)
    if not isinstance(job, dict):
        raise PayloadError(f"payload is {_json_type(job)}, not an object")
    check_job(job)
    return job


def check_job(job: JobDict) -> None:
    """Raise PayloadError (carrying ``job``) unless every field the runtime acts on has a type
    it can act on: ``class``, ``args`` and ``jid`` present, queue names usable as such,
    ``retry`` true, false, null or a non-negative int, ``retry_count`` an int of -1 or more,
    the timestamps of a push numbers, and flow-control keys the brokers can act on. (Fields
    only written by the runtime or only shown, such as ``failed_at`` or ``tags``, are read
    defensively instead.)"""
    get = job.get
    name = get("class")
    if type(name) is not str or not name:
        raise PayloadError(f"payload has no 'class' string (got {_shown(name)})", job)
    args = get("args")
    if type(args) is not list:
        raise PayloadError(f"payload 'args' must be a list, got {_json_type(args)}", job)
    jid = get("jid")
    if not _is_name(jid, MAX_JID):
        raise PayloadError(f"payload 'jid' must be a printable string, got {_shown(jid)}", job)
    # A missing queue is the one the job was read from; a null one would be taken for a name.
    queue = get("queue", "default")
    if not _is_name(queue, MAX_QUEUE):
        raise PayloadError(f"payload 'queue' {_NAME_RULE}, got {_shown(queue)}", job)
    retry_queue = get("retry_queue")
    if retry_queue is not None and not _is_name(retry_queue, MAX_QUEUE):
        raise PayloadError(f"payload 'retry_queue' {_NAME_RULE}, got {_shown(retry_queue)}", job)
    retry = get("retry")
    if not (retry is None or type(retry) is bool or (type(retry) is int and retry >= 0)):
        raise PayloadError(
            f"payload 'retry' must be true, false or a non-negative integer, got {_shown(retry)}", job
        )
    count = get("retry_count")
    # -1: retried by hand after its first failure ("Retry now" takes one off the count).
    if count is not None and not (type(count) is int and count >= -1):
        raise PayloadError(
            f"payload 'retry_count' must be an integer of -1 or more, got {_shown(count)}", job
        )
    for key in _TIMESTAMPS:
        value = get(key)
        if value is not None and type(value) is not float and type(value) is not int:
            raise PayloadError(f"payload {key!r} must be an epoch timestamp, got {_shown(value)}", job)
    flow = check_fields(job)
    if flow is not None:
        raise PayloadError(f"payload {flow}", job)


def dumps_storable(job: Mapping[str, Any]) -> str:
    """``dumps`` for a job read back from a store (to retry, bury or enqueue it again): text
    every store can write. A payload may spell a lone surrogate (``"\\ud800"``), which
    decodes to a string UTF-8 cannot encode; such characters are written back as the same
    escapes. Raises ValueError for a float JSON cannot hold (a literal such as ``1e999``)."""
    encoded = dumps(job)
    if encoded.isascii():
        return encoded
    try:
        encoded.encode()
    except UnicodeEncodeError:
        # Only surrogates fail, and they only occur inside JSON strings, where Python's
        # backslash escape of one is the JSON escape of it.
        return encoded.encode("utf-8", "backslashreplace").decode()
    return encoded


def valid_jid(value: object) -> str | None:
    """``value`` if it is a jid a job may carry, else None."""
    return value if isinstance(value, str) and _is_name(value, MAX_JID) else None


def valid_queue(value: object) -> str | None:
    """``value`` if it is a queue name a job may carry, else None."""
    return value if isinstance(value, str) and _is_name(value, MAX_QUEUE) else None


def unparseable(raw: bytes, queue: str, reason: str, jid: str | None = None) -> JobDict:
    """A dead-set entry for a payload that cannot be handled as it is, keeping exactly what
    was pushed: its text as the only arg, and when the bytes are not UTF-8, the bytes in
    base64 as ``payload_base64`` (the arg then shows them with U+FFFD replacements).

    ``jid``: the payload's own (``valid_jid``), so that the entry can be found by it.
    """
    stamp = now()
    try:
        text, exact = raw.decode(), True
    except UnicodeDecodeError:
        text, exact = raw.decode("utf-8", errors="replace"), False
    entry: JobDict = {
        "retry": False,
        "queue": queue,
        "class": "AsyncTask::UnparseableJob",
        "args": [text],
        "jid": jid or new_jid(),
        "created_at": stamp,
        "enqueued_at": stamp,
        "error_message": reason,
        "error_class": "asynctask.PayloadError",
        "failed_at": stamp,
        "retry_count": 0,
    }
    if not exact:
        entry["payload_base64"] = base64.b64encode(raw).decode()
    return entry


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


_decoder = json.JSONDecoder(parse_constant=_refuse_constant)
_scan = make_scanner(_decoder)  # type: ignore[arg-type]  # the stub asks for a scanner, not the decoder it reads


def _decode(text: str) -> Any:
    """``_decoder.decode``, with a payload's usual shape (one value, nothing around it) read by
    the C scanner alone: ``decode`` adds two regex matches and two calls to every job."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        end = -1
    if end == len(text):
        return value
    # White space around the value, or no value: json's own reading, and its words.
    return _decoder.decode(text)


_TOO_DEEP = f"payload is nested deeper than {MAX_DEPTH} levels"
#: For ``bytes.translate``: objects' braces become brackets, everything but them and quotes goes.
_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_MARK = bytes(set(range(256)) - set(b'"[]{}'))
#: From this many bytes on, a payload's brackets are counted by ``find`` rather than ``count``.
_LONG = 8192
_NAME_RULE = f"must be a printable string of at most {MAX_QUEUE} characters"
#: What a queue name is (``valid_queue``), for messages.
QUEUE_NAME_RULE = f"a queue name is 1 to {MAX_QUEUE} printable characters"
_TIMESTAMPS = ("at", "created_at", "enqueued_at")


def _more_brackets_than(raw: bytes, limit: int) -> bool:
    if len(raw) < _LONG:
        return raw.count(b"[") + raw.count(b"{") > limit
    # A long payload is mostly text: ``find`` skips it at memchr's speed, ``count`` cannot.
    found = 0
    for bracket in (b"[", b"{"):
        at = raw.find(bracket)
        while at >= 0:
            found += 1
            if found > limit:
                return True
            at = raw.find(bracket, at + 1)
    return False


def _nested_deeper(raw: bytes, limit: int) -> bool:
    """Whether the (valid) JSON ``raw`` nests arrays and objects deeper than ``limit``,
    measured without recursion, in a few passes of C over the bytes."""
    if b"\\" in raw:
        # Escaped backslashes, then escaped quotes: the quotes left are the strings' own.
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = raw.translate(_SQUARE, _NOT_MARK)
    # A string without brackets is an empty pair of quotes now. When every quote is in such
    # a pair, no string holds brackets; otherwise keep only what is outside the strings
    # (brackets inside them nest nothing).
    if 2 * marks.count(b'""') == marks.count(b'"'):
        brackets = marks.translate(None, b'"')
    else:
        brackets = b"".join(marks.split(b'"')[::2])
    # Each pass deletes the innermost pairs: one level of nesting.
    for _ in range(limit):
        brackets = brackets.replace(b"[]", b"")
        if not brackets:
            return False
    return True


def _not_json(text: str, exc: ValueError) -> str:
    if text.startswith("\ufeff"):
        return "payload is not valid JSON: it starts with a byte order mark (U+FEFF)"
    return f"payload is not valid JSON: {exc}"


def _json_type(value: object) -> str:
    """How JSON names the type of a decoded value."""
    if value is None:
        return "a JSON null"
    if isinstance(value, bool):
        return "a JSON boolean"
    if isinstance(value, int | float):
        return "a JSON number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return f"a JSON {names.get(type(value), type(value).__name__)}"


def check_names(job: Mapping[str, Any]) -> None:
    """Raise ``InvalidName`` unless the job's class, queue, retry queue and jid, those it has, are
    names every broker holds, within their columns: refused before anything is pushed, rather
    than buried by the worker or refused by the database. Queue names and jids are printable
    (log lines and keys show them); a class name is any text but NUL and lone surrogates (a
    payload's ``class`` is any string, as in Sidekiq)."""
    name = job.get("class")
    if name is not None and not _is_class(name):
        _refuse_name("job class", "class", name, MAX_CLASS, "NUL or a lone surrogate")
    for what, field, longest in _NAMES:
        value = job.get(field)
        if value is not None and not _is_name(value, longest):
            _refuse_name(what, field, value, longest, "NUL or another character that is not printable")


_NAMES = (
    ("queue", "queue", MAX_QUEUE),
    ("retry queue", "retry_queue", MAX_QUEUE),
    ("jid", "jid", MAX_CLIENT_JID),
)


def _is_class(value: object) -> bool:
    return type(value) is str and 0 < len(value) <= MAX_CLASS and storable.UNSTORABLE.search(value) is None


def _refuse_name(what: str, field: str, value: object, longest: int, forbidden: str) -> None:
    if type(value) is not str:
        why = f"{what} must be a string, got {_shown(value)}"
    elif not value:
        why = f"{what} is empty"
    elif len(value) > longest:
        why = f"{what} {reprlib.repr(value)} is {len(value)} characters long"
    else:
        why = f"{what} {reprlib.repr(value)} holds {forbidden}"
    rule = "printable characters" if field != "class" else "characters"
    raise InvalidName(f"{why}: a {what} is 1 to {longest} {rule}", field=field)


def _is_name(value: object, longest: int) -> bool:
    """A jid or queue name: printable (no control characters, NUL or lone surrogates, which
    SQL columns and log lines cannot take), 1 to ``longest`` characters."""
    return type(value) is str and 0 < len(value) <= longest and value.isprintable()


def _shown(value: object) -> str:
    """A short rendering of a hostile value for an error message."""
    if value is None:
        return "none"
    return f"{_json_type(value).removeprefix('a JSON ')} {reprlib.repr(value)}"


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
    foreign = _foreign(args)
    if foreign is not None:
        steps, what = foreign
        raise TypeError(f"args{''.join(reversed(steps))} {what}")
    return args


def _foreign(value: Any) -> tuple[list[str], str] | None:
    """None if ``value`` is JSON-native; else where its first other value is (index and key
    steps, innermost first: built only on the way back from it) and what is wrong with it."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else ([], f"is {value!r}, which JSON cannot represent")
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _foreign(item)
            if found is not None:
                found[0].append(f"[{index}]")
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return [], f"has a {type(key).__name__} key {key!r}; JSON object keys must be str"
            found = _foreign(item)
            if found is not None:
                found[0].append(f"[{key!r}]")
                return found
        return None
    return [], (
        f"is a {type(value).__name__}, which is not JSON-native "
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
