"""The package's task functions stand for the default ``Tracking``'s (and ``AsyncTracking``'s)
methods: same names, documents and parameters, as ``help()`` shows them."""

from __future__ import annotations

import inspect

import pytest

import asynctask
from asynctask.tasks.async_service import AsyncTracking
from asynctask.tasks.service import Tracking

NAMES = [
    "create_task",
    "get_task",
    "list_events",
    "list_failed_items",
    "list_tasks",
    "cancel_task",
    "retry_task",
    "update_task",
    "pause_task",
    "resume_task",
    "stop_job",
    "resume_job",
]


@pytest.mark.parametrize("name", NAMES)
def test_a_task_function_shows_its_method_without_self(name: str) -> None:
    for function, method in (
        (getattr(asynctask, name), getattr(Tracking, name)),
        (getattr(asynctask, f"a{name}"), getattr(AsyncTracking, f"a{name}")),
    ):
        assert function.__name__ == method.__name__
        assert function.__doc__ == method.__doc__
        expected = list(inspect.signature(method).parameters.values())[1:]
        assert list(inspect.signature(function).parameters.values()) == expected
