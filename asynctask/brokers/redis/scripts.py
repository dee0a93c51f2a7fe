"""The Lua scripts, read once from ``lua/*.lua`` and run by SHA (reloaded on NOSCRIPT by redis-py)."""

from __future__ import annotations

from functools import cache
from importlib import resources

import redis
from redis.commands.core import Script


@cache
def _source(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


class Scripts:
    """The scripts bound to one connection pool."""

    def __init__(self, conn: redis.Redis) -> None:
        self.fetch: Script = conn.register_script(_source("fetch"))
        self.requeue: Script = conn.register_script(_source("requeue"))
        self.enqueue_due: Script = conn.register_script(_source("enqueue_due"))
        self.record: Script = conn.register_script(_source("record"))
