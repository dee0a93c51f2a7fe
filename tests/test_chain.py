"""Middleware chain semantics (Sidekiq's Middleware::Chain)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from asynctask.middleware import Chain


class Recorder:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    def __call__(self, value: int, call_next: Callable[[], Any]) -> Any:
        self.log.append(f"{self.name}>")
        result = call_next()
        self.log.append(f"<{self.name}")
        return result


class A(Recorder): ...


class B(Recorder): ...


class C(Recorder): ...


def names(chain: Chain[Any]) -> list[str]:
    return [m.name for m in chain if isinstance(m, Recorder)]


def test_add_prepend_insert_remove() -> None:
    log: list[str] = []
    chain: Chain[int] = Chain()
    chain.add(A("a", log))
    chain.add(B("b", log))
    chain.prepend(C("c", log))
    assert names(chain) == ["c", "a", "b"]
    chain.remove(C)
    chain.insert_before(B, C("c2", log))
    assert names(chain) == ["a", "c2", "b"]
    chain.insert_after(B, C("c3", log))
    assert names(chain) == ["a", "b", "c3"]
    assert A in chain and C in chain
    chain.remove(A)
    assert A not in chain


def test_adding_the_same_class_replaces_it() -> None:
    chain: Chain[int] = Chain([A("a1", []), B("b", [])])
    chain.add(A("a2", []))
    assert names(chain) == ["b", "a2"]


def test_insert_relative_to_a_missing_entry_is_an_error() -> None:
    with pytest.raises(ValueError, match="not in the chain"):
        Chain[int]().insert_before(A, B("b", []))


def test_invoke_nests_in_order_and_returns_the_result() -> None:
    log: list[str] = []
    chain: Chain[int] = Chain([A("a", log), B("b", log)])

    def job() -> int:
        log.append("job")
        return 42

    assert chain.invoke(1, final=job) == 42
    assert log == ["a>", "b>", "job", "<b", "<a"]


def test_a_middleware_that_does_not_call_next_stops_the_chain() -> None:
    ran: list[str] = []

    def skip(value: int, call_next: Callable[[], Any]) -> None:
        return None

    chain: Chain[int] = Chain([skip])
    assert chain.invoke(1, final=lambda: ran.append("job")) is None
    assert ran == []


def test_empty_chain_calls_final() -> None:
    assert Chain[int]().invoke(final=lambda: 7) == 7
