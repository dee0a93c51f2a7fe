"""Structured logs: one line per event, logfmt or JSON, quiet (WARNING) by default but for
a start line (``LIFECYCLE``).

Call sites pass context as ``extra={"fields": {...}}``; the formatter renders it after the
message, so every line can be filtered by jid, class or queue.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from asynctask import storable

_RESERVED_CHARS = (" ", "=", '"')
#: The logger of the line a long-running command (``worker``, ``api``) logs when it starts
#: and stops, saying what it serves: INFO, yet shown at the default level (WARNING), so that
#: an operator sees it; a level above WARNING hides it too.
LIFECYCLE = "asynctask.lifecycle"
#: Bytes of a traceback a line keeps: its frames are the runtime's and the job's, its last line
#: the error (cut like any other field).
TRACEBACK_LIMIT = 4 * storable.DEFAULT_TEXT_LIMIT


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        pairs = [
            ("time", _time(record)),
            ("level", record.levelname.lower()),
            ("logger", record.name),
            ("msg", _bounded(record.getMessage())),
            *_fields(record),
        ]
        if record.exc_info:
            pairs.append(("exception", _bounded(self.formatException(record.exc_info), TRACEBACK_LIMIT)))
        return " ".join(f"{key}={_quote(value)}" for key, value in pairs)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": _bounded(record.getMessage()),
            **dict(_fields(record)),
        }
        if record.exc_info:
            entry["exception"] = _bounded(self.formatException(record.exc_info), TRACEBACK_LIMIT)
        return json.dumps(entry, ensure_ascii=False, default=str)


def setup(level: str = "WARNING", fmt: str = "logfmt") -> None:
    """Send AsyncTask's logs to stderr in ``fmt`` ("logfmt" or "json") at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger("asynctask")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    lifecycle = logging.getLogger(LIFECYCLE)
    lifecycle.setLevel(min(root.level, logging.INFO) if root.level <= logging.WARNING else root.level)


def _fields(record: logging.LogRecord) -> list[tuple[str, Any]]:
    return [
        (key, _bounded(value) if isinstance(value, str) else value)
        for key, value in getattr(record, "fields", {}).items()
    ]


def _bounded(text: str, limit: int = storable.DEFAULT_TEXT_LIMIT) -> str:
    """A message or field as a line holds it: escaped and cut as tracked text is (an exception's
    message may be megabytes, or hold a lone surrogate that the stream could not write)."""
    return storable.storable(text, limit)


def _time(record: logging.LogRecord) -> str:
    return (
        datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def _quote(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if text == "" or any(c in text for c in _RESERVED_CHARS) or "\n" in text:
        return json.dumps(text, ensure_ascii=False)
    return text
