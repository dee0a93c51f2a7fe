"""Read-only attributes that decode one value of their owner's, named as the attribute."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, Self, TypeVar, overload

T = TypeVar("T")


class Keyed(Protocol):
    def get(self, key: str, /) -> Any: ...


class Field(Generic[T]):
    """``jid = Field(text)``: the owner's ``get`` of the attribute's name (or ``key``), through
    ``decode``.

    Stored jobs and heartbeats are written by other programs (Ruby Sidekiq, older versions), so
    their decoders turn a missing or mistyped value into its empty answer: a record never
    trusts a value's type."""

    def __init__(self, decode: Callable[[Any], T], key: str = "") -> None:
        self.decode = decode
        self.key = key

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = self.key or name

    @overload
    def __get__(self, instance: None, owner: type) -> Self: ...

    @overload
    def __get__(self, instance: Keyed, owner: type) -> T: ...

    def __get__(self, instance: Keyed | None, owner: type) -> Self | T:
        if instance is None:
            return self
        return self.decode(instance.get(self.key))


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def text_or_empty(value: Any) -> str:
    return value if isinstance(value, str) else ""


def array(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def texts(value: Any) -> list[str]:
    return [v for v in array(value) if isinstance(v, str)]


def count(value: Any) -> int | None:
    """An integer (not a bool); None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number(value: Any) -> int:
    """An integer, or its decimal text; 0 for anything else."""
    if isinstance(value, bytes | str):
        try:
            return int(value)
        except ValueError:
            return 0
    return count(value) or 0
