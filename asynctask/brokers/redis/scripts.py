"""The Lua scripts, read once from ``lua/*.lua`` and run by SHA (reloaded on NOSCRIPT by redis-py).

A script names the files of functions it uses in lines ``--- @include NAME`` (``flow``, the
flow-control functions; ``tracking_seq``, the numbering of tracking transitions...): each
included file comes before it, once, after what that file includes in turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources

import redis
from redis.client import Pipeline
from redis.commands.core import Script

from asynctask.keys import Keys
from asynctask.tracking.outbox import pack

_INCLUDE = re.compile(r"^--- @include (\w+)\n", re.MULTILINE)


def _file(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


@cache
def script_source(name: str) -> str:
    """The script ``lua/<name>.lua`` as Redis runs it: what it includes, then itself."""
    parts: list[str] = []
    included: set[str] = set()

    def add(file: str) -> None:
        if file in included:
            return
        included.add(file)
        text = _file(file)
        for needed in _INCLUDE.findall(text):
            add(needed)
        parts.append(_INCLUDE.sub("", text))

    add(name)
    return "\n".join(parts)


class Scripts:
    """The scripts bound to one connection pool."""

    def __init__(self, conn: redis.Redis) -> None:
        self.fetch: Script = conn.register_script(script_source("fetch"))
        self.requeue: Script = conn.register_script(script_source("requeue"))
        self.give_back: Script = conn.register_script(script_source("give_back"))
        self.enqueue_due: Script = conn.register_script(script_source("enqueue_due"))
        self.record: Script = conn.register_script(script_source("record"))
        self.publish: Script = conn.register_script(script_source("publish"))
        self.push: Script = conn.register_script(script_source("push"))
        self.finish: Script = conn.register_script(script_source("finish"))
        self.admit: Script = conn.register_script(script_source("admit"))
        self.clear: Script = conn.register_script(script_source("clear"))
        self.feed_publish: Script = conn.register_script(script_source("feed_publish"))
        self.feed_update: Script = conn.register_script(script_source("feed_update"))
        self.feed_state: Script = conn.register_script(script_source("feed_state"))
        self.feed_cancel: Script = conn.register_script(script_source("feed_cancel"))
        self.feed_tick: Script = conn.register_script(script_source("feed_tick"))
        self.periodic_take: Script = conn.register_script(script_source("periodic_take"))

    def record_transitions(
        self, keys: Keys, conn: redis.Redis | Pipeline, transitions: Sequence[str]
    ) -> None:
        """Append encoded tracking transitions to the stream as one entry (queued, on a pipeline)."""
        self.record(
            keys=[keys.tracking_stream, keys.tracking_seq],
            args=[len(transitions), pack(transitions)],
            client=conn,
        )
