"""Text that every store can hold: what SQL and Redis refuse, found, escaped or refused.

Two characters that Python strings allow cannot be stored: U+0000 (PostgreSQL's text and JSON
types refuse it) and a lone surrogate (no UTF-8 encodes it, so neither Redis's client nor any
SQL driver can send it). What a caller hands in as data (items, args, meta) is refused with
``InvalidString`` naming where; what job code says about itself (a log line, an exception's
message) is kept, with those characters written as visible escapes (``\\u0000``), and cut at the
tracked text limit with a marker saying how long it was.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

from asynctask.errors import InvalidString

#: Bytes (UTF-8) of one tracked string at most, unless the settings say otherwise
#: (``tracked_text_limit``): an error message, a log line, a string in params as shown.
DEFAULT_TEXT_LIMIT = 32_768
#: A smaller limit would cut the runtime's own messages ("waiting for retry 3 of 25").
MIN_TEXT_LIMIT = 256

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# How repr() spells both (C code, far cheaper than walking a value): a first pass that finds
# the common case, nothing to see, without visiting each string.
_SUSPECT_REPR = re.compile(r"\\x00|\\ud[89a-f]")


def escaped(text: str) -> str:
    """``text`` with each unstorable character as its visible escape, the rest unchanged."""
    if "\x00" not in text and text.isascii():
        return text
    return UNSTORABLE.sub(_escape, text)


def _escape(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"


def bounded(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` bytes of UTF-8 (on a character boundary), with a marker giving
    its full size; unchanged when it fits. ``text`` must be storable (``escaped``)."""
    # Four bytes per character at most: most texts are known to fit without encoding them.
    if len(text) * 4 <= limit:
        return text
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore") + f"... (truncated, {len(data)} bytes)"


def storable(text: str, limit: int) -> str:
    """``text`` as tracking stores it: escaped, then bounded."""
    return bounded(escaped(text), limit)


def storable_value(value: Any, limit: int | None) -> Any:
    """A JSON value (params) with every string in it, keys too, made ``storable`` (only escaped
    when ``limit`` is None); the same object when nothing needed it."""
    if isinstance(value, str):
        return escaped(value) if limit is None else storable(value, limit)
    if not isinstance(value, list | dict):
        return value
    shown = repr(value)
    # No string can be over the limit when the whole is not (cheap: by total length).
    fits = limit is None or len(shown) * 4 <= limit
    if fits and _SUSPECT_REPR.search(shown) is None:
        return value
    if isinstance(value, list):
        return [storable_value(item, limit) for item in value]
    return {storable_value(str(key), limit): storable_value(item, limit) for key, item in value.items()}


def first_unstorable(value: Any, path: str) -> tuple[str, str] | None:
    """The first unstorable character in the strings of ``value`` (keys included) and where it
    is (``path`` and the keys and indexes under it), or None."""
    if isinstance(value, str):
        found = UNSTORABLE.search(value)
        return None if found is None else (found.group(), path)
    if not isinstance(value, list | dict) or _SUSPECT_REPR.search(repr(value)) is None:
        return None
    return _walk(value, path)


def _walk(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, str):
        found = UNSTORABLE.search(value)
        return None if found is None else (found.group(), path)
    children: Iterable[tuple[str, Any]]
    if isinstance(value, dict):
        children = itertools.chain.from_iterable(
            ((f"{path} key {key!r}", key), (f"{path}[{key!r}]", item)) for key, item in value.items()
        )
    elif isinstance(value, list):
        children = ((f"{path}[{index}]", item) for index, item in enumerate(value))
    else:
        return None
    for where, child in children:
        bad = _walk(child, where)
        if bad is not None:
            return bad
    return None


def describe(char: str) -> str:
    return "a NUL character (U+0000)" if char == "\x00" else f"a lone surrogate (U+{ord(char):04X})"


def check(value: Any, field: str, *, item: int | None = None, path: str | None = None) -> None:
    """Raise ``InvalidString`` if a string in ``value`` cannot be stored. ``field`` names the
    argument (``items``, ``args``, ``meta``), ``item`` the item's index within it, ``path``
    how ``value`` is spelled in the message (``field`` by default)."""
    bad = first_unstorable(value, path or (field if item is None else f"{field}[{item}]"))
    if bad is not None:
        char, where = bad
        raise InvalidString(f"{where} holds {describe(char)}, which cannot be stored", field=field, item=item)
