"""When a server that was down first accepts work again, measured from outside.

A thread probes every few milliseconds with a real request (Redis PING, a PostgreSQL login),
not a bare TCP connect: Redis loading its file and PostgreSQL recovering both accept
connections before they can serve them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import redis

#: Seconds between two probes.
PROBE_INTERVAL = 0.01


class FirstAccept:
    def __init__(self, probe: Callable[[], object]) -> None:
        self.probe = probe
        self.at: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="first-accept", daemon=True)

    def start(self) -> FirstAccept:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._done.is_set():
            sent = time.time()
            try:
                self.probe()
            except Exception:
                time.sleep(PROBE_INTERVAL)
                continue
            # The server was serving no later than the moment this probe went out.
            self.at = sent
            self._done.set()

    def wait(self, timeout: float) -> float:
        """The epoch time of the first successful probe."""
        if not self._done.wait(timeout) or self.at is None:
            self._done.set()
            raise AssertionError(f"the server did not accept within {timeout} s")
        return self.at

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)


def redis_probe(url: str) -> Callable[[], object]:
    def probe() -> object:
        conn = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            return conn.ping()
        finally:
            conn.close()

    return probe


def postgres_probe(url: str) -> Callable[[], object]:
    def probe() -> object:
        with psycopg.connect(url, connect_timeout=1) as connection:
            return connection.execute("SELECT 1").fetchone()

    return probe
