"""What a drain section's ``run`` returns: its settings, its runs by repetition, the package
versions and databases it ran against, the seconds each part took, and what failed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import psycopg

from bench.core.machine import package_version


class Run(Protocol):
    @property
    def case(self) -> str: ...

    @property
    def backend(self) -> str: ...

    @property
    def error(self) -> str: ...


R = TypeVar("R", bound=Run)


@dataclass
class SectionResults(Generic[R]):
    settings: dict[str, Any]
    #: (repetition, run), in the order they ran.
    runs: list[tuple[int, R]] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    databases: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def errors(self) -> list[str]:
        return self.failures + [f"{r.case} on {r.backend}: {r.error}" for _, r in self.runs if r.error]


#: Packages whose versions every drain section records.
PACKAGES = ("redis", "SQLAlchemy", "psycopg")


class Framed(Protocol):
    """What ``section_frame`` records a run's frame in: every section's results have it."""

    versions: dict[str, str]
    seconds: dict[str, float]
    failures: list[str]


@contextmanager
def section_frame(results: Framed, packages: tuple[str, ...] = PACKAGES) -> Iterator[ExitStack]:
    """The frame of a section's run: the packages' versions, a stack for what the run opens
    (closed at its end; a clean-up that fails is one of the run's failures), and the seconds
    the whole run took."""
    started = time.monotonic()
    results.versions.update({name: package_version(name) for name in packages})
    stack = ExitStack()
    try:
        yield stack
    finally:
        try:
            stack.close()
        except (RuntimeError, psycopg.Error) as exc:
            results.failures.append(f"clean-up: {exc}")
        results.seconds["total"] = time.monotonic() - started
