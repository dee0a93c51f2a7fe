"""A job that says too much: it logs 10 MB and raises with a 10 MB message, twice retried
(tests/webapi/test_bounded_text.py)."""

from __future__ import annotations

from typing import Any

from asynctask import current_job, job

TEN_MB = 10 * 1024 * 1024


@job(api=True, retry=2)
def shout(chunk: list[Any]) -> None:
    """Log 10 MB, then fail with a 10 MB message."""
    current_job().log("x" * TEN_MB)
    raise RuntimeError("y" * TEN_MB)


@shout.retry_in
def _at_once(count: int, exc: BaseException, payload: dict[str, Any]) -> float:
    return 0.01
