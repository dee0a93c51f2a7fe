"""Pushing jobs from an event loop, on redis-py's asyncio client: the commands and scripts of
``push.plan_push``, awaited.

Pushes of plain jobs (no flow key, nothing tracked) made while the loop is busy are sent
together: the first schedules a send for the loop's next turn, and every plain push made
until then rides in the same pipeline, each waiting for its own replies. Coroutines pushing
side by side then cost one round trip per turn of the loop, not one each; a send takes at most
``MOST_PER_SEND`` pushes, so that packing them never holds the loop for long.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import redis.asyncio

from asynctask import payload
from asynctask.brokers.redis.connection import CONNECT_TIMEOUT, REPLY_MARGIN
from asynctask.brokers.redis.push import Command, ScriptCall, plan_push
from asynctask.brokers.redis.scripts import script_source
from asynctask.keys import Keys
from asynctask.settings import Settings

#: Plain pushes sent in one pipeline at most.
MOST_PER_SEND = 200


class AsyncRedisPusher:
    def __init__(self, settings: Settings) -> None:
        self.redis = redis.asyncio.Redis.from_url(
            settings.redis_url,
            socket_connect_timeout=CONNECT_TIMEOUT,
            socket_timeout=REPLY_MARGIN,
            socket_keepalive=True,
        )
        self.keys = Keys(settings.namespace)
        self.max_payload_bytes = settings.max_payload_bytes
        self._scripts = {name: self.redis.register_script(script_source(name)) for name in ("record", "push")}
        #: Plain pushes waiting for the next send: their commands, and the future each awaits.
        self._waiting: list[tuple[list[Command], asyncio.Future[None]]] = []
        self._sends: set[asyncio.Task[None]] = set()

    async def push(
        self, entries: Sequence[tuple[payload.JobDict, float | None]], *, transitions: Sequence[str] = ()
    ) -> list[str]:
        """``RedisBroker.push``, awaited: the jid the store holds for each entry."""
        plan = plan_push(self.keys, entries, self.max_payload_bytes, transitions=transitions)
        if plan.plain is not None:
            await self._send_with_others(plan.plain)
            return plan.jids
        pipe = self.redis.pipeline(transaction=False)
        for step in plan.steps:
            if isinstance(step, ScriptCall):
                script = self._scripts[step.name]
                # Loaded, if the server lacks it, before the pipeline runs (redis-py's stub types
                # the set as the sync client's scripts).
                pipe.scripts.add(script)  # type: ignore[arg-type]
                pipe.evalsha(script.sha, len(step.keys), *step.keys, *step.args)
            else:
                pipe.execute_command(*step)
        return plan.holders(await pipe.execute())

    async def close(self) -> None:
        if self._sends:
            await asyncio.wait(self._sends)
        await self.redis.aclose()

    async def _send_with_others(self, commands: list[Command]) -> None:
        done = asyncio.get_running_loop().create_future()
        if not self._waiting:
            asyncio.get_running_loop().call_soon(self._send_waiting)
        self._waiting.append((commands, done))
        await done

    def _send_waiting(self) -> None:
        waiting, self._waiting = self._waiting, []
        for start in range(0, len(waiting), MOST_PER_SEND):
            task = asyncio.get_running_loop().create_task(self._send(waiting[start : start + MOST_PER_SEND]))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    async def _send(self, pushes: list[tuple[list[Command], asyncio.Future[None]]]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for commands, _ in pushes:
            for command in commands:
                pipe.execute_command(*command)
        try:
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        except BaseException as exc:
            for _, done in pushes:
                if not done.done():
                    done.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        offset = 0
        for commands, done in pushes:
            mine = replies[offset : offset + len(commands)]
            offset += len(commands)
            failed = next((reply for reply in mine if isinstance(reply, Exception)), None)
            if done.done():
                continue
            if failed is not None:
                done.set_exception(failed)
            else:
                done.set_result(None)
