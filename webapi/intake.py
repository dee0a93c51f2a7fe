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
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Annotated, Any, TypedDict

from flask import Request

from asynctask import storable
from asynctask.errors import InvalidString
from asynctask.job_spec import JobSpec
from asynctask.registry import Registry
from asynctask.tasks.itemkeys import ItemKey, ItemKeyError, TemplateError
from asynctask.tasks.options import TaskOptionError, TaskOptions
from webapi import formats
from webapi.config import ApiConfig
from webapi.errors import ApiError, limit_exceeded
from webapi.jsonreader import parse_document
from webapi.typeschema import Keywords

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
_READERS: dict[str, Callable[[IO[bytes], ApiConfig, formats.Position], Iterator[Any]]] = {
    "csv": formats.csv_rows,
    "ndjson": formats.ndjson_values,
    # Its items have no line a person would look for.
    "json": lambda stream, config, _position: formats.json_array_items(stream, config),
}


def _no_items() -> Generator[Any]:
    yield from ()


class TaskUpload(TypedDict):
    """A task as a file upload; the options are form fields."""

    job: Annotated[str, Keywords(minLength=1)]
    file: Annotated[
        str,
        Keywords(
            contentMediaType="application/octet-stream",
            description="CSV (text/csv or a .csv name), NDJSON (application/x-ndjson, .ndjson, .jsonl) or a "
            "JSON array of items (application/json, .json).",
        ),
    ]


@dataclass
class Submission:
    job: JobSpec[Any]
    options: TaskOptions
    config: ApiConfig
    items: Generator[Any] = field(default_factory=_no_items)
    #: Items read so far (all of them once ``items`` is exhausted).
    counted: list[int] = field(default_factory=lambda: [0])
    #: The spooled body, closed by ``close()``.
    source: IO[bytes] | None = None

    def read(self, items: Iterator[Any], source: IO[bytes], position: formats.Position) -> None:
        """Take the items (checked as they are read), the spooled body they come from and where
        in it the reader is."""
        self.items = _checked(items, self.job, self.config, self.counted, position, self.options.item_key)
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
            fields, _ = formats.body_options(spool, config)
            submission = _submission(fields, registry, config, tenant)
            spool.seek(0)
            submission.read(formats.body_items(spool, config), spool, formats.Position())
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
        return _from_file(kind, upload.stream, _text_submission(request.form, registry, config, tenant))
    if mimetype in CSV_TYPES or mimetype in NDJSON_TYPES:
        kind = "csv" if mimetype in CSV_TYPES else "ndjson"
        return _from_file(kind, request.stream, _text_submission(request.args, registry, config, tenant))
    raise ApiError(
        415,
        "unsupported_media_type",
        "send application/json, text/csv, application/x-ndjson or multipart/form-data",
        {"content_type": mimetype or None},
    )


def _from_file(kind: str, stream: IO[bytes], submission: Submission) -> Submission:
    """Items of a CSV, NDJSON or JSON-array file: counted and parsed in a first read, so a file
    over a limit or with a syntax error is refused before anything is written."""
    config = submission.config
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
        submission.read(items_of(spool, config, position), spool, position)
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
    fields: Mapping[str, Any], registry: Registry, config: ApiConfig, tenant: str | None
) -> Submission:
    """The submission's job and options, checked (its items are read later)."""
    definition = _job(fields, registry)
    return _checked_options(
        definition, config, registry, lambda: TaskOptions.from_json(_option_fields(fields), tenant=tenant)
    )


def _text_submission(
    form: Mapping[str, str], registry: Registry, config: ApiConfig, tenant: str | None
) -> Submission:
    """The submission of a CSV or NDJSON body (options in the query) or an upload (options in
    the form): every field is text."""
    unknown = sorted(set(form) - (formats.BODY_FIELDS - {"items"}))
    if unknown:
        raise ApiError(422, "invalid_request", f"unknown field {unknown[0]!r}", {"field": unknown[0]})
    definition = _job(form, registry)
    return _checked_options(
        definition,
        config,
        registry,
        lambda: TaskOptions.from_text(
            _option_fields(form),
            tenant=tenant,
            read_object=lambda name, text: _json_object(name, text, config),
        ),
    )


def _job(fields: Mapping[str, Any], registry: Registry) -> JobSpec[Any]:
    name = fields.get("job")
    if not isinstance(name, str) or not name:
        raise ApiError(422, "invalid_request", "job must be the name of a job", {"field": "job"})
    if name not in registry or not registry.get(name).api:
        raise ApiError(422, "unknown_job", f"no job {name!r} can be submitted here", {"job": name})
    return registry.get(name)


def _option_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if name != "job"}


def _checked_options(
    definition: JobSpec[Any], config: ApiConfig, registry: Registry, build: Callable[[], TaskOptions]
) -> Submission:
    """``build``'s options, any refusal a 422 naming the field; within the API's own limits."""
    try:
        options = build()
    except TaskOptionError as exc:
        raise ApiError(422, "invalid_request", str(exc), {"field": exc.field}) from None
    except TemplateError as exc:
        raise ApiError(422, "invalid_concurrency_key", str(exc), {"field": "concurrency_key"}) from None
    except InvalidString as exc:
        raise ApiError(422, "invalid_string", str(exc), {"field": exc.field}) from None
    for kind, name in options.callbacks.items():
        if name not in registry or not registry.get(name).api:
            raise ApiError(
                422,
                "unknown_job",
                f"no job {name!r} can be a callback here",
                {"field": f"on_{kind}", "job": name},
            )
    if options.chunk_size > config.max_chunk_size:
        raise limit_exceeded(
            422,
            "chunk_size_too_large",
            "max_chunk_size",
            config.max_chunk_size,
            f"chunk_size may be at most {config.max_chunk_size}",
        )
    return Submission(definition, options, config)


def _json_object(name: str, text: str, config: ApiConfig) -> Any:
    """An object option given as text: as deep, as long and with the same numbers as in a JSON
    body."""
    try:
        return parse_document(
            text.encode("utf-8", "surrogatepass"),
            max_depth=config.max_json_depth,
            max_value_chars=config.max_item_bytes,
            level=formats.FIELD_LEVEL,
        )
    except ApiError as exc:
        if exc.code != "invalid_json":
            raise
        raise ApiError(422, "invalid_request", f"{name} must be a JSON object", {"field": name}) from None


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
    definition: JobSpec[Any],
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
            raise _unstorable(bad, index, position.line)
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


def _unstorable(char: str, index: int, line: int | None) -> ApiError:
    """An item holding a string no store can keep (the options' strings are ``TaskOptions``')."""
    where = f"item {index}" if line is None else f"line {line} (item {index})"
    details: dict[str, Any] = {"field": "items", "item": index}
    if line is not None:
        details["line"] = line
    what = storable.describe(char)
    return ApiError(422, "invalid_string", f"{where} holds {what}, which cannot be stored", details)
