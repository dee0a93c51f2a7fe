"""A private Redis Sentinel group: one master, one replica, three Sentinels, on free ports.

Each server is a ``PrivateRedis`` of its own directory; the Sentinels watch the master under
``SERVICE`` with a quorum of two and call it down after ``DOWN_AFTER_MS``, so that a failover
takes a few seconds. ``kill_master`` is the fault; ``rejoin`` starts the killed server again as
a replica of the promoted one, as an orchestrator restarting the failed node would.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path
from typing import cast

import redis

from tests.chaos.redis_server import START_TIMEOUT, PrivateRedis, started
from tests.processes import free_port

SERVICE = "asynctask"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
SENTINELS = 3
#: A master sends its data to a (re)joining replica at once: by default it waits 5 s for more
#: replicas to share the transfer, all that time without a replica for writes to wait for.
SYNC_NOW = ["--repl-diskless-sync-delay", "0"]


class Sentinel:
    def __init__(self, binary: str, root: Path, master_port: int) -> None:
        self.port = free_port()
        root.mkdir()
        config = root / "sentinel.conf"
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {root}\nlogfile {root / 'sentinel.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
        )
        self.proc = subprocess.Popen(
            [binary, str(config), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.client = redis.Redis(
            port=self.port, socket_timeout=2, socket_connect_timeout=2, decode_responses=True
        )

    def master(self) -> tuple[str, int] | None:
        try:
            found = cast(tuple[str, int] | None, self.client.sentinel_get_master_addr_by_name(SERVICE))
        except redis.RedisError:
            return None
        return (found[0], int(found[1])) if found else None

    def peers(self) -> int:
        try:
            return len(self.client.sentinel_sentinels(SERVICE))
        except redis.RedisError:
            return -1

    def stop(self) -> None:
        self.client.close()
        self.proc.kill()
        self.proc.wait(10)


class SentinelGroup:
    def __init__(self, binary: str, root: Path) -> None:
        self.binary = binary
        self.root = root
        self.master = PrivateRedis(binary, root / "a")
        self.replica = PrivateRedis(binary, root / "b")
        self.sentinels: list[Sentinel] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def start(self) -> None:
        self.master.root.mkdir()
        self.replica.root.mkdir()
        self.master.extra = SYNC_NOW
        self.master.start()
        self.replica.extra = [*SYNC_NOW, "--replicaof", "127.0.0.1", str(self.master.port)]
        self.replica.start()
        self.sentinels = [
            Sentinel(self.binary, self.root / f"s{n}", self.master.port) for n in range(SENTINELS)
        ]
        # Ready once every Sentinel knows the other two (a quorum can then agree) and the
        # replica has synced.
        self._wait(lambda: all(s.peers() == SENTINELS - 1 for s in self.sentinels), "the Sentinels to meet")
        self._wait(lambda: self._synced(self.replica), "the replica to sync")

    def kill_master(self) -> PrivateRedis:
        """``kill -9`` the master; the server object killed (to ``rejoin`` later)."""
        killed = self.master
        killed.kill()
        return killed

    def wait_promoted(self, timeout: float = 30) -> float:
        """Seconds until every Sentinel names the replica as the master."""
        began = time.monotonic()
        wanted = ("127.0.0.1", self.replica.port)
        self._wait(lambda: all(s.master() == wanted for s in self.sentinels), "the failover", timeout)
        self.master, self.replica = self.replica, self.master
        return time.monotonic() - began

    def rejoin(self) -> None:
        """Start the killed server again, as a replica of the new master, and wait for its sync."""
        server = self.replica
        server.extra = [*SYNC_NOW, "--replicaof", "127.0.0.1", str(self.master.port)]
        server.start()
        self._wait(lambda: self._synced(server), "the old master to sync as a replica")

    def _synced(self, server: PrivateRedis) -> bool:
        client = server.client()
        try:
            info = client.info("replication")
        except redis.RedisError:
            return False
        finally:
            client.close()
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    def _wait(self, done: object, what: str, timeout: float = START_TIMEOUT) -> None:
        assert callable(done)
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")
            time.sleep(0.1)

    def logs(self) -> str:
        tails = [f"master: {self.master.log_tail(800)}", f"replica: {self.replica.log_tail(800)}"]
        for n in range(len(self.sentinels)):
            with contextlib.suppress(OSError):
                tails.append(f"sentinel {n}: {(self.root / f's{n}' / 'sentinel.log').read_text()[-800:]}")
        return "\n".join(tails)

    def kill(self) -> None:
        for s in self.sentinels:
            s.stop()
        self.master.kill()
        self.replica.kill()


def sentinel_group() -> contextlib.AbstractContextManager[SentinelGroup]:
    """A started group; every server killed and the directory removed on exit."""
    return started(SentinelGroup, "asynctask-sentinel-")
