"""What ``@asynctask.job`` makes of a function, and what it refuses before any worker could run it."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

import asynctask
from asynctask import Registry


async def fetch(chunk: list[Any]) -> None:
    raise AssertionError("only defined here")


async def stream(chunk: list[Any], cursor: Any = None) -> AsyncIterator[int]:
    yield 1


def wrapped(func: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Coroutine[Any, Any, None]]:
    @functools.wraps(func)
    def call(*args: Any) -> Coroutine[Any, Any, None]:
        return func(*args)

    return call


@pytest.mark.parametrize(
    "func", [fetch, wrapped(fetch), functools.partial(fetch)], ids=["coroutine", "wrapped", "partial"]
)
def test_an_async_function_is_an_async_job(func: Callable[..., Any]) -> None:
    definition = asynctask.job(name="fetch", registry=Registry())(func)
    assert definition.is_async and not definition.resumable


def test_an_async_generator_is_a_resumable_async_job() -> None:
    definition = asynctask.job(name="stream", registry=Registry())(stream)
    assert definition.is_async and definition.resumable


def test_an_async_generator_without_a_cursor_is_refused() -> None:
    async def endless(chunk: list[Any]) -> AsyncIterator[int]:
        yield 1

    with pytest.raises(ValueError, match="'cursor' keyword argument"):
        asynctask.job(name="endless", registry=Registry())(endless)


def test_a_plain_function_and_a_generator_are_jobs() -> None:
    registry = Registry()

    def plain(chunk: list[Any]) -> None:
        return None

    def resumable(chunk: list[Any], cursor: Any = None) -> Any:
        yield 1

    made = asynctask.job(name="plain", registry=registry)(plain)
    assert not made.resumable and not made.is_async
    made = asynctask.job(name="resumable", registry=registry)(resumable)
    assert made.resumable and not made.is_async


def no_args() -> None: ...
def two(a: int, b: int) -> None: ...
def one_optional(a: int, b: int = 0) -> None: ...
def rest(a: int, *more: int) -> None: ...
def positional_only(a: int, /, b: int = 0) -> None: ...
def keywords(a: int, *, flag: bool = False, **extra: Any) -> None: ...
def keyword_required(a: int, *, flag: bool) -> None: ...


@pytest.mark.parametrize(
    "func", [no_args, two, one_optional, rest, positional_only, keywords, keyword_required]
)
def test_arguments_are_accepted_exactly_when_the_function_could_take_them(func: Callable[..., Any]) -> None:
    definition = asynctask.job(name=func.__name__, registry=Registry())(func)
    signature = inspect.signature(func)
    for count in range(5):
        args = list(range(count))
        try:
            signature.bind(*args)
        except TypeError:
            with pytest.raises(asynctask.JobArgumentsError, match=f"cannot take {count} argument"):
                definition.check_args(args)
        else:
            definition.check_args(args)
