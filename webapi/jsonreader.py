"""JSON read from a stream one value at a time, within limits.

A bulk body may be 64 MiB: parsed whole, a body of ``[{},{},...]`` takes gigabytes before its
item count can even be looked at. ``JsonReader`` walks the document's outer structure itself
and hands each value (one item, ``meta``) to the standard decoder, so memory holds one value at
a time, and a count, a depth or a size over its limit is refused when it is reached.

Numbers must be finite (PostgreSQL's and SQLite's JSON cannot store NaN or infinities): ``NaN``,
``Infinity`` and ``1e999`` are ``invalid_number``, not a server error later.
"""

from __future__ import annotations

import codecs
import io
import json
import math
import re
from collections.abc import Iterable, Iterator
from typing import IO, Any

from webapi.errors import ApiError, limit_exceeded

#: Bytes read from the stream at a time; a value longer than this is read in growing steps.
READ_SIZE = 64 * 1024
_WHITESPACE = re.compile(r"[ \t\n\r]*")
#: A whole string, a bracket, or (alone) the opening quote of a string the buffer cuts off.
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]|"')
#: The characters of a number or a literal (true, false, null).
_SCALAR = re.compile(r'[^\s,:\[\]{}"]*')


class _NotFinite(Exception):
    pass


class _TooDeep(Exception):
    pass


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise _NotFinite(text)
    return number


def _no_constant(text: str) -> Any:
    raise _NotFinite(text)


_DECODER = json.JSONDecoder(parse_float=_finite_float, parse_constant=_no_constant)


class JsonReader:
    """A JSON document read from ``stream``: ``begin_object`` and ``next_key`` walk an object,
    ``items`` an array, and ``value`` reads one whole value.

    ``max_depth`` counts the document itself as level 1; ``max_value_chars`` bounds the text of
    one value read by ``value()``.
    """

    def __init__(self, stream: IO[bytes], *, max_depth: int, max_value_chars: int) -> None:
        self._stream = stream
        self._decode = codecs.getincrementaldecoder("utf-8-sig")().decode
        self._buffer = ""
        self._pos = 0
        #: Characters dropped from the buffer's front, for positions in error messages.
        self._dropped = 0
        self._eof = False
        self.max_depth = max_depth
        self.max_value_chars = max_value_chars

    # --- the outer structure -------------------------------------------------------------------

    def peek(self) -> str:
        """The next character that is not whitespace ("" at the end)."""
        while True:
            self._pos = _WHITESPACE.match(self._buffer, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buffer):
                return self._buffer[self._pos]
            if not self._read():
                return ""

    def begin_object(self) -> bool:
        """Consume ``{``; False (nothing consumed) when the next value is not an object."""
        if self.peek() != "{":
            return False
        self._pos += 1
        return True

    def next_key(self, first: bool) -> str | None:
        """The object's next key and its colon, or None after its closing brace."""
        if first and self.peek() == "}":
            self._pos += 1
            return None
        if not first:
            if self._take("}"):
                return None
            self._expect(",")
        if self.peek() != '"':
            raise self._syntax("expected a string key")
        key = self.value(1)
        self._expect(":")
        return str(key)

    def items(self, level: int) -> Iterator[Any]:
        """The items of the array the reader is at (``level`` is the array's own), one at a time."""
        self._expect("[")
        if level > self.max_depth:
            raise too_deep(self.max_depth)
        if self._take("]"):
            return
        while True:
            yield self.value(level + 1)
            if self._take("]"):
                return
            self._expect(",")

    def end(self) -> None:
        """Only whitespace may follow the document."""
        if self.peek():
            raise self._syntax("extra data after the JSON value")

    # --- one value ------------------------------------------------------------------------------

    def value(self, level: int) -> Any:
        """The whole value the reader is at; ``level`` is its nesting level in the document."""
        if not self.peek():
            raise self._syntax("expected a value, found the end")
        scan = _Scan(self._room(level))
        while True:
            start = self._pos
            try:
                value, end = _DECODER.raw_decode(self._buffer, start)
            except json.JSONDecodeError as exc:
                try:
                    complete = self._eof or scan.complete(self._buffer, start)
                except _TooDeep:
                    raise too_deep(self.max_depth) from None
                if complete:
                    raise self._syntax(exc.msg, exc.pos) from None
            except RecursionError:
                raise too_deep(self.max_depth) from None
            except _NotFinite as exc:
                raise invalid_number(str(exc)) from None
            except ValueError as exc:
                # An integer of more digits than Python converts (sys.get_int_max_str_digits).
                raise invalid_number(str(exc)) from None
            else:
                # A number or literal that reaches the buffer's end may go on in the next read
                # ("1e" decodes as 1 when "+300" is still to come).
                if self._eof or _ends_inside(self._buffer, start, end):
                    break
            if len(self._buffer) - start > self.max_value_chars:
                raise value_too_large(self.max_value_chars)
            self._read(len(self._buffer) - start)
        if end - start > self.max_value_chars:
            raise value_too_large(self.max_value_chars)
        self._pos = end
        if deeper_than(value, self._room(level)):
            raise too_deep(self.max_depth)
        return value

    # --- buffering ------------------------------------------------------------------------------

    def _read(self, at_least: int = READ_SIZE) -> bool:
        """Append the stream's next text to the buffer, dropping what was read; False at its end."""
        text = ""
        while not text and not self._eof:
            data = self._stream.read(max(READ_SIZE, at_least))
            try:
                # A read may end inside a character: the decoder keeps its first bytes.
                text = self._decode(data, not data)
            except UnicodeDecodeError:
                raise ApiError(400, "invalid_json", "the body is not UTF-8 text") from None
            self._eof = not data
        if text:
            self._dropped += self._pos
            self._buffer = self._buffer[self._pos :] + text
            self._pos = 0
        return bool(text)

    def _take(self, char: str) -> bool:
        if self.peek() != char:
            return False
        self._pos += 1
        return True

    def _expect(self, char: str) -> None:
        if not self._take(char):
            raise self._syntax(f"expected {char!r}")

    def _room(self, level: int) -> int:
        """How many levels a value at ``level`` may nest (itself included)."""
        return self.max_depth - level + 1

    def _syntax(self, message: str, pos: int | None = None) -> ApiError:
        at = self._dropped + (self._pos if pos is None else pos)
        return ApiError(400, "invalid_json", f"not valid JSON: {message} (character {at + 1})")


def _ends_inside(buffer: str, start: int, end: int) -> bool:
    if buffer[start] in '"[{':
        return end < len(buffer)
    return _SCALAR.match(buffer, start).end() < len(buffer)  # type: ignore[union-attr]


class _Scan:
    """Whether the value at the buffer's ``start`` ends inside the buffer, found without parsing it.

    A decode error means a syntax error only if the value was all there; otherwise more must be
    read. The scan goes on from where the last one stopped, so a long value costs one scan in all.
    """

    def __init__(self, room: int) -> None:
        #: Levels the value may nest; more raise ``_TooDeep`` without reading further.
        self._room = room
        self._offset = 0
        self._depth = 0

    def complete(self, buffer: str, start: int) -> bool:
        if self._offset == 0:
            first = buffer[start]
            if first not in "[{":
                if first == '"':
                    match = _STRUCTURE.match(buffer, start)
                    return match is not None and len(match.group()) > 1
                return _SCALAR.match(buffer, start).end() < len(buffer)  # type: ignore[union-attr]
        for match in _STRUCTURE.finditer(buffer, start + self._offset):
            token = match.group()
            if token == '"':
                # A string the buffer cuts off: scan it again once more has been read.
                self._offset = match.start() - start
                return False
            if token in "[{":
                self._depth += 1
                if self._depth > self._room:
                    raise _TooDeep
            elif token in "]}":
                self._depth -= 1
                if self._depth == 0:
                    return True
        self._offset = len(buffer) - start
        return False


def deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays/objects nest more than ``limit`` levels (``value`` itself is level 1)."""
    pending: list[tuple[Iterable[Any], int]] = []
    if isinstance(value, dict | list):
        pending.append((value.values() if isinstance(value, dict) else value, 1))
    while pending:
        children, depth = pending.pop()
        if depth > limit:
            return True
        for child in children:
            if isinstance(child, dict):
                pending.append((child.values(), depth + 1))
            elif isinstance(child, list):
                pending.append((child, depth + 1))
    return False


def too_deep(max_depth: int) -> ApiError:
    return limit_exceeded(
        422, "json_too_deep", "max_json_depth", max_depth, f"JSON may nest at most {max_depth} levels"
    )


def value_too_large(max_chars: int) -> ApiError:
    return limit_exceeded(
        413,
        "item_too_large",
        "max_item_bytes",
        max_chars,
        f"one item (or meta) may be at most {max_chars} characters of JSON",
    )


def invalid_number(text: str) -> ApiError:
    shown = text if len(text) <= 40 else f"{text[:37]}..."
    return ApiError(
        422,
        "invalid_number",
        f"{shown} is not a finite number that can be stored (NaN, Infinity and numbers "
        "beyond 1.8e308 cannot)",
    )


def parse_document(data: bytes, *, max_depth: int, max_value_chars: int, level: int = 1) -> Any:
    """One whole JSON document given as bytes (an NDJSON line, ``meta`` in a query), at ``level``."""
    reader = JsonReader(io.BytesIO(data), max_depth=max_depth, max_value_chars=max_value_chars)
    value = reader.value(level)
    reader.end()
    return value
