"""The Lua scripts, read once from ``lua/*.lua`` and run by SHA (reloaded on NOSCRIPT by redis-py)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Literal

import redis
from redis.client import Pipeline
from redis.commands.core import Script

from asynctask.keys import Keys
from asynctask.tracking.outbox import pack


@cache
def _source(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def with_flow(source: str) -> str:
    """A script that acts on flow control's keys: the ``flow`` prelude's functions, then ``source``."""
    return _source("flow") + "\n" + source


def _with_flow(name: str) -> str:
    return with_flow(_with_seq(name))


def _with_seq(name: str) -> str:
    """A script that numbers tracking transitions: the ``tracking_seq`` function, then ``name``."""
    return _source("tracking_seq") + "\n" + _source(name)


def script_source(name: Literal["record", "push"]) -> str:
    """The source of a script an asyncio client runs, as ``Scripts`` registers it."""
    return _with_seq("record") if name == "record" else _with_flow("push")


class Scripts:
    """The scripts bound to one connection pool."""

    def __init__(self, conn: redis.Redis) -> None:
        self.fetch: Script = conn.register_script(_with_flow("fetch"))
        self.requeue: Script = conn.register_script(_source("requeue"))
        self.give_back: Script = conn.register_script(_source("give_back"))
        self.enqueue_due: Script = conn.register_script(_with_flow("enqueue_due"))
        self.record: Script = conn.register_script(script_source("record"))
        self.publish: Script = conn.register_script(_with_flow("publish"))
        self.push: Script = conn.register_script(script_source("push"))
        self.finish: Script = conn.register_script(_with_flow("finish"))
        self.admit: Script = conn.register_script(_with_flow("admit"))
        self.clear: Script = conn.register_script(_with_flow("clear"))
        self.feed_publish: Script = conn.register_script(_with_flow("feed_publish"))
        self.feed_update: Script = conn.register_script(_with_flow("feed_update"))
        self.feed_state: Script = conn.register_script(_with_flow("feed_state"))
        self.feed_cancel: Script = conn.register_script(_with_flow("feed_cancel"))
        self.feed_tick: Script = conn.register_script(_with_flow("feed_tick"))
        self.periodic_take: Script = conn.register_script(_with_flow("periodic_take"))

    def record_transitions(
        self, keys: Keys, conn: redis.Redis | Pipeline, transitions: Sequence[str]
    ) -> None:
        """Append encoded tracking transitions to the stream as one entry (queued, on a pipeline)."""
        self.record(
            keys=[keys.tracking_stream, keys.tracking_seq],
            args=[len(transitions), pack(transitions)],
            client=conn,
        )
