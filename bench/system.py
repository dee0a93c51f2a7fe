"""What the runner needs to know about a job system: how to enqueue, how to start a worker."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: The repository root: workers and enqueuers run from here, as a developer would run them.
ROOT = Path(__file__).resolve().parent.parent

#: Variables that would point a child at another Redis or change its settings behind our back.
_SCRUBBED_PREFIXES = ("ASYNCTASK_", "SIDEKIQ_", "BENCH_")
_SCRUBBED = ("REDIS_URL", "REDIS_PROVIDER", "RUBYOPT", "PYTHONPATH", "PYTHONSTARTUP")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without Redis or job-system settings, plus ``extra``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in _SCRUBBED and not key.startswith(_SCRUBBED_PREFIXES)
    }
    env.update(extra)
    return env


@dataclass(frozen=True)
class System:
    """One job system under test.

    ``enqueue_argv(url, mode, jobs, batch)`` is a command printing ``{"jobs", "seconds"}``;
    ``worker_argv(concurrency)`` starts one worker process on queue ``default``;
    ``env(url, marker)`` is the environment of both.
    """

    name: str
    enqueue_argv: Callable[[str, str, int, int], list[str]]
    worker_argv: Callable[[int], list[str]]
    env: Callable[[str, Path | None], dict[str, str]]
    #: Human-readable configuration, written to RESULTS.md.
    describe: Callable[[], list[str]]
    #: Key prefix of AsyncTask's in-flight lists, checked to be empty after a run ("" if none).
    inflight_pattern: str = ""
