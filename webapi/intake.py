"""Reading ``POST /api/tasks``: JSON, CSV, NDJSON or a multipart upload, within the limits.

Items are parsed and checked lazily, while ``create_task`` writes them in its one
transaction: an upload of 100,000 rows is never held in memory, and the first bad item
raises an ``ApiError`` that rolls the whole task back (nothing is written or enqueued).
Raw bodies are first copied to a spooled temporary file, so a slow client never holds a
database transaction open.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from flask import Request

from asynctask.job import JobDefinition
from asynctask.registry import Registry
from webapi.config import ApiConfig
from webapi.errors import ApiError, limit_exceeded

CSV_TYPES = {"text/csv", "application/csv"}
NDJSON_TYPES = {"application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"}
JSON_TYPES = {"application/json"}
#: Schema errors listed in a 422 (the count covers them all).
LISTED_ERRORS = 20
#: Raw bodies up to this size stay in memory; larger ones go to a temporary file.
SPOOL_MEMORY = 4 * 1024 * 1024
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
BODY_FIELDS = {"job", "items", "chunk_size", "queue", "meta"}


@dataclass
class Submission:
    job: JobDefinition[Any]
    chunk_size: int
    queue: str | None
    meta: dict[str, Any] | None
    items: Iterator[Any]
    #: Items read so far (all of them once ``items`` is exhausted).
    counted: list[int] = field(default_factory=lambda: [0])
    #: The spooled body, closed by ``close()``.
    source: IO[bytes] | None = None

    def close(self) -> None:
        if self.source is not None:
            self.source.close()

    @property
    def item_count(self) -> int:
        return self.counted[0]


def read_submission(request: Request, config: ApiConfig, registry: Registry) -> Submission:
    mimetype = request.mimetype
    if mimetype in JSON_TYPES or mimetype.endswith("+json") or mimetype == "multipart/form-data":
        _no_query_options(request.args)
    if mimetype in JSON_TYPES or mimetype.endswith("+json"):
        body = _parse_json(request.get_data(cache=False), config.max_json_depth, base=1)
        if not isinstance(body, dict):
            raise ApiError(422, "invalid_request", "the body must be a JSON object", {"field": None})
        unknown = sorted(set(body) - BODY_FIELDS)
        if unknown:
            raise ApiError(422, "invalid_request", f"unknown field {unknown[0]!r}", {"field": unknown[0]})
        items = body.get("items")
        if not isinstance(items, list):
            raise ApiError(422, "invalid_request", "items must be a JSON array", {"field": "items"})
        if len(items) > config.max_items:
            raise _too_many(config)
        return _submission(body, registry, config, iter(items))
    if mimetype == "multipart/form-data":
        upload = request.files.get("file")
        if upload is None:
            raise ApiError(
                422, "invalid_request", "the form needs a file field named file", {"field": "file"}
            )
        kind = _file_kind(upload.mimetype, upload.filename or "")
        options = _options(request.form)
        return _submission(options, registry, config, _items_from(kind, upload.stream, config))
    if mimetype in CSV_TYPES or mimetype in NDJSON_TYPES:
        kind = "csv" if mimetype in CSV_TYPES else "ndjson"
        options = _options(request.args)
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)
        shutil.copyfileobj(request.stream, spool, 64 * 1024)
        spool.seek(0)
        try:
            submission = _submission(options, registry, config, _items_from(kind, spool, config))
        except BaseException:
            spool.close()
            raise
        submission.source = spool
        return submission
    raise ApiError(
        415,
        "unsupported_media_type",
        "send application/json, text/csv, application/x-ndjson or multipart/form-data",
        {"content_type": mimetype or None},
    )


def _submission(
    options: Mapping[str, Any], registry: Registry, config: ApiConfig, items: Iterator[Any]
) -> Submission:
    name = options.get("job")
    if not isinstance(name, str) or not name:
        raise ApiError(422, "invalid_request", "job must be the name of a job", {"field": "job"})
    if name not in registry or not registry.get(name).api:
        raise ApiError(422, "unknown_job", f"no job {name!r} can be submitted here", {"job": name})
    definition = registry.get(name)
    chunk_size = options.get("chunk_size", 1)
    if isinstance(chunk_size, float) and chunk_size.is_integer():
        # JSON does not tell 2 from 2.0, and JSON Schema counts both as integers.
        chunk_size = int(chunk_size)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
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
    if meta is not None and _holds_nul(meta):
        raise _nul("meta")
    submission = Submission(definition, chunk_size, queue, meta, iter(()))
    submission.items = _checked(items, definition, config, submission.counted)
    return submission


def _options(form: Mapping[str, str]) -> dict[str, Any]:
    """Options given as query or form fields, all strings: convert them to the JSON shapes."""
    unknown = sorted(set(form) - (BODY_FIELDS - {"items"}))
    if unknown:
        raise ApiError(422, "invalid_request", f"unknown field {unknown[0]!r}", {"field": unknown[0]})
    options: dict[str, Any] = {k: v for k, v in form.items() if k in ("job", "queue")}
    if "chunk_size" in form:
        try:
            options["chunk_size"] = int(form["chunk_size"])
        except ValueError:
            raise ApiError(
                422, "invalid_request", "chunk_size must be an integer", {"field": "chunk_size"}
            ) from None
    if form.get("meta"):
        try:
            options["meta"] = json.loads(form["meta"])
        except (ValueError, RecursionError):
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


def _items_from(kind: str, stream: IO[bytes], config: ApiConfig) -> Iterator[Any]:
    if kind == "csv":
        return _csv_rows(stream)
    if kind == "ndjson":
        return _ndjson_values(stream, config.max_json_depth)
    items = _parse_json(stream.read(), config.max_json_depth, base=1)
    if not isinstance(items, list):
        raise ApiError(422, "invalid_request", "a .json file must hold an array of items", {"field": "file"})
    return iter(items)


def _csv_rows(stream: IO[bytes]) -> Iterator[dict[str, str]]:
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    reader = csv.reader(text)
    try:
        header = next(reader, None)
        if header is None:
            return
        if len(set(header)) != len(header) or any(not name.strip() for name in header):
            raise ApiError(
                400, "invalid_csv", "the header row needs distinct, non-empty column names", {"line": 1}
            )
        width = len(header)
        for row in reader:
            if not row:
                continue
            if len(row) != width:
                raise ApiError(
                    400,
                    "invalid_csv",
                    f"line {reader.line_num} has {len(row)} fields; the header has {width}",
                    {"line": reader.line_num},
                )
            yield dict(zip(header, row, strict=True))
    except UnicodeDecodeError:
        raise ApiError(
            400, "invalid_csv", "the file is not UTF-8 text", {"line": reader.line_num + 1}
        ) from None
    except csv.Error as exc:
        raise ApiError(
            400, "invalid_csv", f"line {reader.line_num}: {exc}", {"line": reader.line_num}
        ) from None


def _ndjson_values(stream: IO[bytes], max_depth: int) -> Iterator[Any]:
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            yield _parse_json(line, max_depth, base=1)
        except ApiError as exc:
            if exc.code == "invalid_json":
                raise ApiError(
                    400, "invalid_json", f"line {number}: {exc.message}", {"line": number}
                ) from None
            raise


def _parse_json(data: bytes, max_depth: int, *, base: int) -> Any:
    try:
        value = json.loads(data)
    except RecursionError:
        raise _too_deep(max_depth) from None
    except UnicodeDecodeError:
        raise ApiError(400, "invalid_json", "the body is not UTF-8 text") from None
    except ValueError as exc:
        raise ApiError(400, "invalid_json", f"not valid JSON: {exc}") from None
    if _deeper_than(value, max_depth - base + 1):
        raise _too_deep(max_depth)
    return value


def _deeper_than(value: Any, limit: int) -> bool:
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


def _checked(
    items: Iterator[Any], definition: JobDefinition[Any], config: ApiConfig, counted: list[int]
) -> Iterator[Any]:
    """Count the items against the limit and match each to the job's schema.

    At the first item that does not match, the rest are still read (not enqueued) so that the
    422 can list the first errors and say how many items are wrong.
    """
    validator = definition.item_validator
    for index, item in enumerate(items):
        if index >= config.max_items:
            raise _too_many(config)
        counted[0] = index + 1
        if _holds_nul(item):
            raise _nul("items", index)
        if validator is not None and not validator.is_valid(item):
            _fail_validation(index, item, items, validator, config)
        yield item


def _fail_validation(index: int, item: Any, rest: Iterator[Any], validator: Any, config: ApiConfig) -> None:
    listed: list[dict[str, Any]] = []
    wrong = 0
    for position, value in enumerate(itertools.chain([item], rest), start=index):
        if position >= config.max_items:
            raise _too_many(config)
        if validator.is_valid(value):
            continue
        wrong += 1
        for error in validator.iter_errors(value):
            if len(listed) < LISTED_ERRORS:
                path = "".join(f"/{part}" for part in error.instance_path)
                listed.append({"item": position, "path": path or "/", "message": error.message})
    raise ApiError(
        422,
        "validation_failed",
        f"{wrong} item(s) do not match the job's item schema; nothing was enqueued",
        {"errors": listed, "error_count": wrong},
    )


def _no_query_options(args: Mapping[str, str]) -> None:
    """A JSON body or a form carries its own options; one in the query string would be ignored."""
    for name in args:
        raise ApiError(
            422,
            "invalid_request",
            f"{name!r} belongs in the body (the query string holds options only for CSV and NDJSON bodies)",
            {"field": name},
        )


def _holds_nul(value: Any) -> bool:
    """Whether a string in ``value`` holds U+0000, which PostgreSQL cannot store.

    One ``repr`` (C code) finds the common case, none, without walking the value.
    """
    if "\\x00" not in repr(value):
        return False
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def _nul(field: str, index: int | None = None) -> ApiError:
    where = f"item {index}" if index is not None else field
    details: dict[str, Any] = {"field": field} if index is None else {"field": field, "item": index}
    return ApiError(
        422, "invalid_request", f"{where} holds a NUL character (U+0000), which cannot be stored", details
    )


def _too_many(config: ApiConfig) -> ApiError:
    return limit_exceeded(
        413,
        "too_many_items",
        "max_items",
        config.max_items,
        f"a task may have at most {config.max_items} items",
    )


def _too_deep(max_depth: int) -> ApiError:
    return limit_exceeded(
        422, "json_too_deep", "max_json_depth", max_depth, f"JSON may nest at most {max_depth} levels"
    )
