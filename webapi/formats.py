"""The items of a bulk body, read one at a time from a (spooled) stream: CSV rows, NDJSON lines,
the items of a JSON array, and the ``{"job", "items", ...}`` JSON body.

Every reader holds one item in memory and refuses one longer than ``max_item_bytes``; the JSON
ones also refuse nesting deeper than ``max_json_depth`` and numbers that cannot be stored.
"""

from __future__ import annotations

import codecs
import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Annotated, Any, NoReturn, TypedDict

from asynctask.tasks.options import TaskOptions
from webapi.config import ApiConfig
from webapi.errors import ApiError, limit_exceeded
from webapi.jsonreader import JsonReader, parse_document, value_too_large
from webapi.typeschema import Keywords


class TaskSubmission(TypedDict):
    """A task as JSON (nesting at most ASYNCTASK_API_MAX_JSON_DEPTH (32) levels)."""

    job: Annotated[str, Keywords(minLength=1, description="A job listed by `GET /api/jobs`.")]
    items: Annotated[
        list[Any],
        Keywords(
            minItems=1,
            description="The items (each must match the job's item schema); at most "
            "ASYNCTASK_API_MAX_ITEMS (200000).",
        ),
    ]


#: The JSON body's fields: the task's, and its options (``TaskOptions``, which describe themselves).
BODY_FIELDS = {*TaskSubmission.__annotations__, *TaskOptions.request_fields()}
#: Levels in the JSON body: the body is level 1, its fields' values level 2, each item level 3.
FIELD_LEVEL = 2


@dataclass
class Position:
    """Where the item a reader yielded last starts in the body, so an error about the item can
    point at the line a person edits (CSV and NDJSON; a JSON body has no useful line)."""

    line: int | None = None
    #: The items are CSV rows: their keys are the file's columns.
    columns: bool = False


def json_reader(stream: IO[bytes], config: ApiConfig) -> JsonReader:
    return JsonReader(stream, max_depth=config.max_json_depth, max_value_chars=config.max_item_bytes)


def body_options(stream: IO[bytes], config: ApiConfig) -> tuple[dict[str, Any], int]:
    """A first read of the JSON body: its fields other than ``items``, and how many items it has.

    Items are parsed (a syntax error, a bad number or a nesting too deep is found here) and
    dropped; more than ``max_items`` stops the read at once.
    """
    reader = json_reader(stream, config)
    if not reader.begin_object():
        not_an_object(reader)
    options: dict[str, Any] = {}
    count: int | None = None
    first = True
    while (key := reader.next_key(first)) is not None:
        first = False
        if key in options or (key == "items" and count is not None):
            raise ApiError(422, "invalid_request", f"field {key!r} is given twice", {"field": key})
        if key not in BODY_FIELDS:
            raise ApiError(422, "invalid_request", f"unknown field {key!r}", {"field": key})
        if key != "items":
            options[key] = reader.value(FIELD_LEVEL)
            continue
        if reader.peek() != "[":
            raise _items_not_an_array()
        count = 0
        for _ in reader.items(FIELD_LEVEL):
            count += 1
            if count > config.max_items:
                raise too_many_items(config)
    reader.end()
    if count is None:
        raise _items_not_an_array()
    return options, count


def body_items(stream: IO[bytes], config: ApiConfig) -> Iterator[Any]:
    """The items of a JSON body that ``body_options`` has read through without an error."""
    reader = json_reader(stream, config)
    reader.begin_object()
    first = True
    while (key := reader.next_key(first)) is not None:
        first = False
        if key == "items":
            yield from reader.items(FIELD_LEVEL)
            return
        reader.value(FIELD_LEVEL)


def json_array_items(stream: IO[bytes], config: ApiConfig) -> Iterator[Any]:
    """A ``.json`` upload: one array of items (level 1; its items are level 2)."""
    reader = json_reader(stream, config)
    if reader.peek() != "[":
        # Something else, read within the item limit to tell bad JSON (400) from a wrong shape.
        reader.value(1)
        raise ApiError(422, "invalid_request", "a .json file must hold an array of items", {"field": "file"})
    yield from reader.items(1)
    reader.end()


def ndjson_values(stream: IO[bytes], config: ApiConfig, position: Position) -> Iterator[Any]:
    limit = config.max_item_bytes
    number = 0
    blanks = BlankRun(limit)
    while line := stream.readline(limit + 1):
        number += 1
        if len(line) > limit and not line.endswith(b"\n"):
            raise _on_line(value_too_large(limit), number)
        if not line.strip():
            blanks.add(len(line), number)
            continue
        blanks.end()
        try:
            value = parse_document(line, max_depth=config.max_json_depth, max_value_chars=limit)
        except ApiError as exc:
            raise _on_line(exc, number) from None
        position.line = number
        yield value


def csv_rows(stream: IO[bytes], config: ApiConfig, position: Position) -> Iterator[dict[str, str]]:
    """The rows of a CSV body as objects keyed by its header's columns. An error names the line
    its record starts on: a quoted field may span lines, and one never closed runs to the end."""
    position.columns = True
    lines = _Lines(stream, config.max_item_bytes)
    reader = csv.reader(lines)
    start = 1
    try:
        header = next(reader, None)
        if header is None:
            return
        _check_closed(lines, start)
        if len(set(header)) != len(header) or any(not name.strip() for name in header):
            raise ApiError(
                400, "invalid_csv", "the header row needs distinct, non-empty column names", {"line": 1}
            )
        width = len(header)
        blanks = BlankRun(config.max_item_bytes)
        while True:
            start = lines.number + 1
            lines.used = 0
            row = next(reader, None)
            if row is None:
                return
            _check_closed(lines, start)
            if not row:
                blanks.add(lines.used, lines.number)
                continue
            blanks.end()
            if len(row) != width:
                raise ApiError(
                    400,
                    "invalid_csv",
                    f"line {start} has {len(row)} fields; the header has {width}",
                    {"line": start},
                )
            position.line = start
            yield dict(zip(header, row, strict=True))
    except _NotUtf8 as exc:
        raise ApiError(
            400, "invalid_csv", f"line {exc.line} is not UTF-8 text (a CSV body must be)", {"line": exc.line}
        ) from None
    except csv.Error as exc:
        raise ApiError(400, "invalid_csv", f"line {start}: {exc}", {"line": start}) from None
    except _RecordTooLong:
        raise _on_line(value_too_large(config.max_item_bytes), start) from None


class _RecordTooLong(Exception):
    pass


class _NotUtf8(Exception):
    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


#: Where a bare carriage return ends a line (as in files of classic Mac OS): the csv module reads
#: it as a line end, and so does a person's editor.
_BARE_CR = re.compile(r"(?<=\r)(?!\n)")


class _Lines:
    """The lines of a CSV body for ``csv.reader``, each decoded on its own: a byte that is not
    UTF-8 is found on its line (a text wrapper decodes whole chunks, far ahead of the reader).

    ``number`` counts the lines handed out, ``used`` the bytes read since the caller last reset
    it (a record's, bounded by ``limit``); ``ended`` is set once the body is read through."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self.stream = stream
        self.limit = limit
        self.number = 0
        self.used = 0
        self.ended = False
        self.at_start = True
        #: Pieces of the last line still to hand out, last first (only a bare CR makes several).
        self.pending: list[str] = []

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        while not self.pending:
            if self.ended:
                raise StopIteration
            raw = self.stream.readline(self.limit + 1)
            self.used += len(raw)
            if self.used > self.limit:
                raise _RecordTooLong
            if not raw:
                self.ended = True
                raise StopIteration
            if self.at_start:
                # A byte order mark is not part of the first column's name.
                self.at_start = False
                raw = raw.removeprefix(codecs.BOM_UTF8)
            # A line is whole here (or the body's last bytes), so it decodes on its own.
            try:
                text = raw.decode()
            except UnicodeDecodeError as exc:
                raise _NotUtf8(
                    self.number + 1 + len(_BARE_CR.findall(raw[: exc.start].decode("latin-1")))
                ) from None
            cr = text.find("\r")
            # No CR, or only the one of a CRLF ending (as Python's csv module writes lines).
            if cr == -1 or (cr == len(text) - 2 and text[-1] == "\n"):
                if text:
                    self.number += 1
                    return text
                continue
            self.pending = [piece for piece in reversed(_BARE_CR.split(text)) if piece]
        self.number += 1
        return self.pending.pop()


def _check_closed(lines: _Lines, start: int) -> None:
    """Refuse the record just read if it ran to the end of the body: the only way one does is a
    quoted field that is never closed (the csv module ends it there and says nothing)."""
    if lines.ended:
        raise ApiError(
            400,
            "invalid_csv",
            f"line {start}: a quoted field is not closed before the end of the file",
            {"line": start},
        )


class BlankRun:
    """Blank lines in a row, refused once they pass ``limit`` bytes: a body of nothing but line
    breaks would otherwise hold its request thread for as long as it takes to read it all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.first = 0

    def add(self, size: int, line: int) -> None:
        if not self.size:
            self.first = line
        self.size += size
        if self.size > self.limit:
            raise ApiError(
                422,
                "blank_lines",
                f"lines {self.first} to {line} are blank, over {self.limit} bytes of them in a row "
                "(max_item_bytes): an item was expected",
                {"line": line},
            )

    def end(self) -> None:
        self.size = 0


def too_many_items(config: ApiConfig) -> ApiError:
    return limit_exceeded(
        413,
        "too_many_items",
        "max_items",
        config.max_items,
        f"a task may have at most {config.max_items} items",
    )


def not_an_object(reader: JsonReader) -> NoReturn:
    # An array is refused at its first character, however long it is; anything else is read
    # (within the item limit) to tell bad JSON (400) from a wrong shape.
    if reader.peek() != "[":
        reader.value(1)
    raise ApiError(422, "invalid_request", "the body must be a JSON object", {"field": None})


def _items_not_an_array() -> ApiError:
    return ApiError(422, "invalid_request", "items must be a JSON array", {"field": "items"})


def _on_line(exc: ApiError, number: int) -> ApiError:
    details = exc.details if isinstance(exc.details, dict) else {}
    return ApiError(exc.status, exc.code, f"line {number}: {exc.message}", {**details, "line": number})
