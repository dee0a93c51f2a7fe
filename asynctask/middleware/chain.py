"""An ordered chain of around-style middleware, as Sidekiq's ``Middleware::Chain``.

Each middleware receives the call's arguments plus ``call_next``; it may run code before and
after ``call_next()``, see the exception it raises, change what it returns, or not call it at
all (the push is dropped, or the job is skipped). Middleware objects are identified by their
class, so adding a second instance of a class replaces the first; plain functions are
identified by themselves. Instances are shared by all threads,
so they must keep per-job state on the stack, not on ``self``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from functools import partial
from types import BuiltinFunctionType, FunctionType, MethodType
from typing import Any, Generic, TypeVar

R = TypeVar("R")
Middleware = Callable[..., Any]


class Chain(Generic[R]):
    def __init__(self, entries: Iterable[Middleware] = ()) -> None:
        self._lock = threading.Lock()
        self._entries: tuple[Middleware, ...] = ()
        for entry in entries:
            self.add(entry)

    def add(self, middleware: Middleware) -> None:
        """Append ``middleware`` (the innermost so far), replacing one of the same class."""
        with self._lock:
            kept = [e for e in self._entries if _kind(e) != _kind(middleware)]
            self._entries = (*kept, middleware)

    def prepend(self, middleware: Middleware) -> None:
        """Put ``middleware`` first (the outermost), replacing one of the same class."""
        with self._lock:
            kept = [e for e in self._entries if _kind(e) != _kind(middleware)]
            self._entries = (middleware, *kept)

    def insert_before(self, existing: type | Middleware, middleware: Middleware) -> None:
        self._insert(existing, middleware, offset=0)

    def insert_after(self, existing: type | Middleware, middleware: Middleware) -> None:
        self._insert(existing, middleware, offset=1)

    def remove(self, target: type | Middleware) -> None:
        with self._lock:
            self._entries = tuple(e for e in self._entries if not _matches(e, target))

    def copy(self) -> Chain[R]:
        return Chain(self._entries)

    def __contains__(self, target: object) -> bool:
        return any(_matches(e, target) for e in self._entries)

    def __iter__(self) -> Iterator[Middleware]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def invoke(self, *args: Any, final: Callable[[], R]) -> R | None:
        """Run the chain around ``final``; each middleware is called as ``mw(*args, call_next)``."""
        entries = self._entries
        if not entries:
            return final()
        if len(entries) == 1:
            # The common case (the default chains hold only the tracking middleware), without
            # building a closure per call.
            result: R | None = entries[0](*args, final)
            return result

        def call(index: int) -> R | None:
            if index == len(entries):
                return final()
            outcome: R | None = entries[index](*args, lambda: call(index + 1))
            return outcome

        return call(0)

    def ainvoke(self, *args: Any, final: Callable[[], Awaitable[R]]) -> Awaitable[R | None]:
        """Run the chain around the awaitable ``final`` (an async job), on the running loop: the
        awaitable of the outermost middleware (of the job itself, for an empty chain)."""
        entries = self._entries
        if not entries:
            return final()
        around = getattr(entries[0], "acall", None)
        if len(entries) == 1 and around is not None:
            # The common case (the default chain holds only the tracking middleware), with no
            # coroutine of the chain's own: each layer is passed through at every await of the job.
            outcome: Awaitable[R | None] = around(*args, final)
            return outcome
        return self._ainvoke(entries, args, final)

    async def _ainvoke(
        self, entries: tuple[Middleware, ...], args: tuple[Any, ...], final: Callable[[], Awaitable[R]]
    ) -> R | None:
        async def call(index: int) -> R | None:
            if index == len(entries):
                return await final()
            entry = entries[index]
            rest: Callable[[], Coroutine[Any, Any, R | None]] = lambda: call(index + 1)  # noqa: E731
            around = getattr(entry, "acall", None)
            if around is not None:
                outcome: R | None = await around(*args, rest)
                return outcome
            return await _around_on_thread(entry, args, rest)

        return await call(0)

    def _insert(self, existing: type | Middleware, middleware: Middleware, offset: int) -> None:
        with self._lock:
            kept = [e for e in self._entries if _kind(e) != _kind(middleware)]
            for index, entry in enumerate(kept):
                if _matches(entry, existing):
                    kept.insert(index + offset, middleware)
                    break
            else:
                raise ValueError(f"{existing!r} is not in the chain")
            self._entries = tuple(kept)


#: Threads that run sync middleware around async jobs (made on first use, one per job in flight).
_threads: concurrent.futures.ThreadPoolExecutor | None = None
_threads_lock = threading.Lock()


def _middleware_threads() -> concurrent.futures.ThreadPoolExecutor:
    global _threads
    with _threads_lock:
        if _threads is None:
            # Bounded by the worker's async slots, not by this pool: a job waits for none.
            _threads = concurrent.futures.ThreadPoolExecutor(1024, thread_name_prefix="asynctask-middleware")
        return _threads


async def _around_on_thread(
    entry: Middleware, args: tuple[Any, ...], rest: Callable[[], Coroutine[Any, Any, R | None]]
) -> R | None:
    """Run a sync middleware on a thread; its ``call_next`` awaits the rest of the chain on the loop."""
    loop = asyncio.get_running_loop()
    inner: list[concurrent.futures.Future[R | None]] = []

    def call_next() -> R | None:
        # Scheduled from the middleware's thread, in its context: the job's context goes along.
        future = asyncio.run_coroutine_threadsafe(rest(), loop)
        inner.append(future)
        return future.result()

    job_context = contextvars.copy_context()

    def around() -> R | None:
        outcome: R | None = job_context.run(entry, *args, call_next)
        return outcome

    try:
        outcome = await loop.run_in_executor(_middleware_threads(), around)
    except asyncio.CancelledError:
        # The job is being interrupted: so is the part of the chain the thread waits for.
        for future in inner:
            future.cancel()
        raise
    return outcome


def _kind(entry: Middleware) -> object:
    if isinstance(entry, FunctionType | MethodType | BuiltinFunctionType | partial):
        return entry
    return type(entry)


def _matches(entry: Middleware, target: object) -> bool:
    return entry is target or (isinstance(target, type) and type(entry) is target)
