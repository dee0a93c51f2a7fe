"""A line of tasks, each waiting for the one before: ``asynctask.chain(step(...), step(...))``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Unpack

from asynctask.tasks.options import TaskFields, TaskOptions


@dataclass(frozen=True)
class TaskStep:
    """One task of a chain: what ``create_task`` takes (its job, its items, its options)."""

    job: Any
    items: Iterable[Any]
    options: TaskOptions = field(default_factory=TaskOptions)


def step(
    job: Any, items: Iterable[Any], options: TaskOptions | None = None, **given: Unpack[TaskFields]
) -> TaskStep:
    """A step of ``chain``: ``job`` over ``items``, with ``options`` and the keyword arguments
    (``TaskOptions``' fields, on top), checked now."""
    return TaskStep(job, items, (options or TaskOptions()).merged(given))


def linked(previous: str, current: TaskStep, run_if: str) -> TaskOptions:
    """``current``'s options once it waits for the task ``previous`` too."""
    after = [previous, *(current.options.after or ())]
    return current.options.merged({"after": after, "run_if": run_if})
