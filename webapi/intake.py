"""Reading ``POST /api/tasks``: JSON, CSV, NDJSON or a multipart upload, within the limits.

The body is copied to a spooled temporary file, so a slow client never holds a database
transaction open, and read from there twice, one item at a time (``webapi.formats``): a first
read counts the items and finds syntax errors, bad numbers and nesting too deep before anything
is written; the second feeds ``create_task``, which writes the items in its one transaction
while each is checked here (storable strings, the job's item schema). A bad item raises an
``ApiError`` that rolls the whole task back (nothing is written or enqueued), and no upload is
ever held in memory whole.
"""

from __future__ import annotations

import io
import itertools
import re
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal

from flask import Request

from asynctask import storable
from asynctask.job import JobDefinition
from asynctask.registry import Registry
from asynctask.tasks.itemkeys import ItemKey, ItemKeyError, TemplateError
from webapi import feeds, formats
from webapi.config import ApiConfig
from webapi.errors import ApiError, limit_exceeded
from webapi.feeds import FeedOptions, creation_options
from webapi.jsonreader import parse_document

if TYPE_CHECKING:
    # Loaded by the jobs that have an item schema, and only by them (asynctask.job).
    import jsonschema_rs

CSV_TYPES = {"text/csv", "application/csv"}
NDJSON_TYPES = {"application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"}
JSON_TYPES = {"application/json"}
#: Schema errors listed in a 422 (the count covers them all).
LISTED_ERRORS = 20
#: Raw bodies up to this size stay in memory; larger ones go to a temporary file.
SPOOL_MEMORY = 4 * 1024 * 1024
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
#: Options given as query or form fields that are strings as they are.
_TEXT_OPTIONS = ("job", "queue", "concurrency_key", "concurrency_on_failure")
#: The largest ``concurrency_limit``: what every store's integer column holds.
MAX_CONCURRENCY_LIMIT = 2**31 - 1
_READERS: dict[str, Callable[[IO[bytes], ApiConfig, formats.Position], Iterator[Any]]] = {
    "csv": formats.csv_rows,
    "ndjson": formats.ndjson_values,
    # Its items have no line a person would look for.
    "json": lambda stream, config, _position: formats.json_array_items(stream, config),
}


def _no_items() -> Generator[Any]:
    yield from ()


@dataclass
class Submission:
    job: JobDefinition[Any]
    chunk_size: int
    queue: str | None
    meta: dict[str, Any] | None
    #: The ``concurrency_key`` template as given, and the key it gives each item (the tenant's).
    concurrency_key: str | None = None
    key_of: ItemKey | None = None
    concurrency_limit: int = 1
    concurrency_on_failure: Literal["hold", "continue"] = "hold"
    feed: FeedOptions = field(default_factory=FeedOptions)
    items: Generator[Any] = field(default_factory=_no_items)
    #: Items read so far (all of them once ``items`` is exhausted).
    counted: list[int] = field(default_factory=lambda: [0])
    #: The spooled body, closed by ``close()``.
    source: IO[bytes] | None = None

    def read(
        self, items: Iterator[Any], config: ApiConfig, source: IO[bytes], position: formats.Position
    ) -> None:
        """Take the items (checked as they are read), the spooled body they come from and where
        in it the reader is."""
        self.items = _checked(items, self.job, config, self.counted, position, self.key_of)
        self.source = source

    def close(self) -> None:
        # The readers first, while the body they read is still open.
        self.items.close()
        if self.source is not None:
            self.source.close()

    @property
    def item_count(self) -> int:
        return self.counted[0]


def read_submission(
    request: Request, config: ApiConfig, registry: Registry, tenant: str | None
) -> Submission:
    """The request's task, for ``tenant`` (whose concurrency keys are its own)."""
    mimetype = request.mimetype
    is_json = mimetype in JSON_TYPES or mimetype.endswith("+json")
    if is_json or mimetype == "multipart/form-data":
        _no_query_options(request.args)
    if is_json:
        spool = _spooled(request.stream)
        try:
            options, _ = formats.body_options(spool, config)
            submission = _submission(options, registry, config, tenant)
            spool.seek(0)
            submission.read(formats.body_items(spool, config), config, spool, formats.Position())
        except BaseException:
            spool.close()
            raise
        return submission
    if mimetype == "multipart/form-data":
        upload = request.files.get("file")
        if upload is None:
            raise ApiError(
                422, "invalid_request", "the form needs a file field named file", {"field": "file"}
            )
        kind = _file_kind(upload.mimetype, upload.filename or "")
        options = _options(request.form, config)
        return _from_file(kind, upload.stream, options, registry, config, tenant)
    if mimetype in CSV_TYPES or mimetype in NDJSON_TYPES:
        kind = "csv" if mimetype in CSV_TYPES else "ndjson"
        return _from_file(kind, request.stream, _options(request.args, config), registry, config, tenant)
    raise ApiError(
        415,
        "unsupported_media_type",
        "send application/json, text/csv, application/x-ndjson or multipart/form-data",
        {"content_type": mimetype or None},
    )


def _from_file(
    kind: str,
    stream: IO[bytes],
    options: Mapping[str, Any],
    registry: Registry,
    config: ApiConfig,
    tenant: str | None,
) -> Submission:
    """Items of a CSV, NDJSON or JSON-array file: counted and parsed in a first read, so a file
    over a limit or with a syntax error is refused before anything is written."""
    submission = _submission(options, registry, config, tenant)
    items_of = _READERS[kind]
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)
    try:
        # The first pass reads the body as it arrives, keeping a copy: a body refused for what
        # it holds so far (bad syntax, too many items, a run of blank lines) is not read to its end.
        arriving = io.BufferedReader(_Copying(stream, spool))
        for index, _ in enumerate(items_of(arriving, config, formats.Position())):
            if index >= config.max_items:
                raise formats.too_many_items(config)
        shutil.copyfileobj(stream, spool, 64 * 1024)
        spool.seek(0)
        position = formats.Position()
        submission.read(items_of(spool, config, position), config, spool, position)
    except BaseException:
        spool.close()
        raise
    return submission


class _Copying(io.RawIOBase):
    """``source`` read as it is, each byte read also written to ``copy``."""

    def __init__(self, source: IO[bytes], copy: IO[bytes]) -> None:
        self.source = source
        self.copy = copy

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.source.read(len(buffer))
        buffer[: len(data)] = data
        self.copy.write(data)
        return len(data)


def _spooled(stream: IO[bytes]) -> IO[bytes]:
    """The body copied to a temporary file (in memory while small), read twice from there: a
    slow client never holds a database transaction open."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)
    try:
        shutil.copyfileobj(stream, spool, 64 * 1024)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


def _submission(
    options: Mapping[str, Any], registry: Registry, config: ApiConfig, tenant: str | None
) -> Submission:
    """The submission's options, checked (its items are read later)."""
    name = options.get("job")
    if not isinstance(name, str) or not name:
        raise ApiError(422, "invalid_request", "job must be the name of a job", {"field": "job"})
    if name not in registry or not registry.get(name).api:
        raise ApiError(422, "unknown_job", f"no job {name!r} can be submitted here", {"job": name})
    definition = registry.get(name)
    chunk_size = _integer(options.get("chunk_size", 1))
    if chunk_size is None or chunk_size < 1:
        raise ApiError(
            422, "invalid_request", "chunk_size must be an integer of at least 1", {"field": "chunk_size"}
        )
    if chunk_size > config.max_chunk_size:
        raise limit_exceeded(
            422,
            "chunk_size_too_large",
            "max_chunk_size",
            config.max_chunk_size,
            f"chunk_size may be at most {config.max_chunk_size}",
        )
    queue = options.get("queue")
    if queue is not None and (not isinstance(queue, str) or not QUEUE_NAME.fullmatch(queue)):
        raise ApiError(
            422,
            "invalid_request",
            "queue must be 1 to 100 letters, digits or _ . : -",
            {"field": "queue"},
        )
    meta = options.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise ApiError(422, "invalid_request", "meta must be a JSON object", {"field": "meta"})
    if meta is not None:
        bad = _bad_character(meta)
        if bad is not None:
            raise _unstorable(bad, "meta")
    submission = Submission(definition, chunk_size, queue, meta, feed=creation_options(options))
    _flow_options(submission, options, tenant)
    return submission


def _flow_options(submission: Submission, options: Mapping[str, Any], tenant: str | None) -> None:
    template = options.get("concurrency_key")
    limit = _integer(options.get("concurrency_limit", 1))
    if limit is None or not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
        raise ApiError(
            422,
            "invalid_request",
            f"concurrency_limit must be an integer from 1 to {MAX_CONCURRENCY_LIMIT}",
            {"field": "concurrency_limit"},
        )
    on_failure = options.get("concurrency_on_failure", "hold")
    if on_failure not in ("hold", "continue"):
        raise ApiError(
            422,
            "invalid_request",
            "concurrency_on_failure must be hold or continue",
            {"field": "concurrency_on_failure"},
        )
    if "concurrency_key" not in options:
        for name in ("concurrency_limit", "concurrency_on_failure"):
            if name in options:
                raise ApiError(422, "invalid_request", f"{name} needs a concurrency_key", {"field": name})
        return
    if not isinstance(template, str):
        raise ApiError(
            422, "invalid_request", "concurrency_key must be a string", {"field": "concurrency_key"}
        )
    bad = _bad_character(template)
    if bad is not None:
        raise _unstorable(bad, "concurrency_key")
    try:
        submission.key_of = ItemKey(template, tenant)
    except TemplateError as exc:
        raise ApiError(422, "invalid_concurrency_key", str(exc), {"field": "concurrency_key"}) from None
    submission.concurrency_key = template
    submission.concurrency_limit = limit
    submission.concurrency_on_failure = on_failure


def _integer(value: Any) -> int | None:
    """``value`` as an integer, or None if it is not one. JSON does not tell 2 from 2.0, and JSON
    Schema counts both as integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _options(form: Mapping[str, str], config: ApiConfig) -> dict[str, Any]:
    """Options given as query or form fields, all strings: convert them to the JSON shapes."""
    unknown = sorted(set(form) - (formats.BODY_FIELDS - {"items"}))
    if unknown:
        raise ApiError(422, "invalid_request", f"unknown field {unknown[0]!r}", {"field": unknown[0]})
    options: dict[str, Any] = {k: v for k, v in form.items() if k in _TEXT_OPTIONS}
    options.update(feeds.from_text(form))
    for name in ("chunk_size", "concurrency_limit"):
        if name in form:
            try:
                options[name] = int(form[name])
            except ValueError:
                raise ApiError(
                    422, "invalid_request", f"{name} must be an integer", {"field": name}
                ) from None
    if form.get("meta"):
        # As deep, as long and with the same numbers as meta in a JSON body.
        text = form["meta"].encode("utf-8", "surrogatepass")
        try:
            options["meta"] = parse_document(
                text,
                max_depth=config.max_json_depth,
                max_value_chars=config.max_item_bytes,
                level=formats.FIELD_LEVEL,
            )
        except ApiError as exc:
            if exc.code != "invalid_json":
                raise
            raise ApiError(422, "invalid_request", "meta must be a JSON object", {"field": "meta"}) from None
    return options


def _file_kind(mimetype: str, filename: str) -> str:
    lowered = filename.lower()
    if mimetype in CSV_TYPES or lowered.endswith(".csv"):
        return "csv"
    if mimetype in NDJSON_TYPES or lowered.endswith((".ndjson", ".jsonl")):
        return "ndjson"
    if mimetype in JSON_TYPES or lowered.endswith(".json"):
        return "json"
    raise ApiError(
        415,
        "unsupported_media_type",
        "the file must be CSV (.csv), NDJSON (.ndjson, .jsonl) or a JSON array (.json)",
        {"content_type": mimetype or None},
    )


def _checked(
    items: Iterator[Any],
    definition: JobDefinition[Any],
    config: ApiConfig,
    counted: list[int],
    position: formats.Position,
    key_of: ItemKey | None,
) -> Generator[Any]:
    """Count the items against the limit, match each to the job's schema and, with a
    concurrency key, resolve its key.

    At the first item that does not match, the rest are still read (not enqueued) so that the
    422 can list the first errors and say how many items are wrong.
    """
    validator = definition.item_validator
    for index, item in enumerate(items):
        if index >= config.max_items:
            raise formats.too_many_items(config)
        counted[0] = index + 1
        bad = _bad_character(item)
        if bad is not None:
            raise _unstorable(bad, "items", index, position.line)
        if validator is not None and not validator.is_valid(item):
            _fail_validation(index, item, items, validator, config, position)
        if key_of is not None:
            _check_key(key_of, item, index, position)
        yield item


def _check_key(key_of: ItemKey, item: Any, index: int, position: formats.Position) -> None:
    """An item without a key is refused here, where its line is known (create_task resolves the
    keys again, cheaply, when it splits the items into chunks)."""
    try:
        key_of(item)
    except ItemKeyError as exc:
        where = f"item {index}" if position.line is None else f"line {position.line} (item {index})"
        details: dict[str, Any] = {"field": "items", "item": index, "key_field": exc.field}
        if position.line is not None:
            details["line"] = position.line
        raise ApiError(
            422, "concurrency_key_unresolved", f"{where}: {exc}; nothing was enqueued", details
        ) from None


def _fail_validation(
    index: int,
    item: Any,
    rest: Iterator[Any],
    validator: jsonschema_rs.Validator,
    config: ApiConfig,
    position: formats.Position,
) -> None:
    listed: list[dict[str, Any]] = []
    wrong = 0
    for at, value in enumerate(itertools.chain([item], rest), start=index):
        if at >= config.max_items:
            raise formats.too_many_items(config)
        if validator.is_valid(value):
            continue
        wrong += 1
        for error in validator.iter_errors(value):
            if len(listed) < LISTED_ERRORS:
                listed.append(_schema_error(at, error, position))
    raise ApiError(
        422,
        "validation_failed",
        f"{wrong} item(s) do not match the job's item schema; nothing was enqueued",
        {"errors": listed, "error_count": wrong},
    )


def _schema_error(
    index: int, error: jsonschema_rs.ValidationError, position: formats.Position
) -> dict[str, Any]:
    """One entry of a 422's list: the item, the JSON pointer inside it and the message, and in a
    CSV or NDJSON body the line the item starts on; in a CSV body also the column at fault."""
    # Loaded already: only an item schema's validator gets here.
    import jsonschema_rs

    path = "".join(f"/{part}" for part in error.instance_path)
    entry: dict[str, Any] = {"item": index, "path": path or "/", "message": error.message}
    if position.line is not None:
        entry["line"] = position.line
    if position.columns:
        if error.instance_path:
            entry["column"] = str(error.instance_path[0])
        elif isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Required):
            entry["column"] = error.kind.property
    return entry


def _no_query_options(args: Mapping[str, str]) -> None:
    """A JSON body or a form carries its own options; one in the query string would be ignored."""
    for name in args:
        raise ApiError(
            422,
            "invalid_request",
            f"{name!r} belongs in the body (the query string holds options only for CSV and NDJSON bodies)",
            {"field": name},
        )


def _bad_character(value: Any) -> str | None:
    """The first character of a string in ``value`` (keys included) that cannot be stored."""
    bad = storable.first_unstorable(value, "")
    return None if bad is None else bad[0]


def _unstorable(char: str, field: str, index: int | None = None, line: int | None = None) -> ApiError:
    where = f"item {index}" if index is not None else field
    if line is not None:
        where = f"line {line} ({where})"
    what = storable.describe(char)
    details: dict[str, Any] = {"field": field} if index is None else {"field": field, "item": index}
    if line is not None:
        details["line"] = line
    return ApiError(422, "invalid_string", f"{where} holds {what}, which cannot be stored", details)
