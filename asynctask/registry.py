"""The registry: the only place where a payload's ``class`` string becomes code.

Nothing is ever imported because a payload names it. A worker knows the jobs that the
modules it loaded (``-r``) registered, and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from asynctask.errors import JobNotRegistered

if TYPE_CHECKING:
    from asynctask.job_spec import JobSpec


class Registry:
    def __init__(self) -> None:
        self._jobs: dict[str, JobSpec[Any]] = {}

    def add(self, definition: JobSpec[Any]) -> None:
        existing = self._jobs.get(definition.name)
        if existing is not None and existing.func is not definition.func:
            raise ValueError(
                f"job name {definition.name!r} is already registered by "
                f"{existing.func.__module__}.{existing.func.__qualname__}"
            )
        self._jobs[definition.name] = definition

    def get(self, name: str) -> JobSpec[Any]:
        try:
            return self._jobs[name]
        except KeyError:
            raise JobNotRegistered(name) from None

    def registered(self, name: str) -> JobSpec[Any] | None:
        """The definition registered as ``name``, if any."""
        return self._jobs.get(name)

    def remove(self, name: str) -> None:
        self._jobs.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def __iter__(self) -> Iterator[JobSpec[Any]]:
        return iter(list(self._jobs.values()))

    def __len__(self) -> int:
        return len(self._jobs)


#: Where ``@asynctask.job`` registers unless told otherwise.
default_registry = Registry()
