"""The API server under test, ``python -m asynctask api`` on a free port, and the RSS of its workers."""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from bench.core import procs
from bench.core.redis_server import free_port
from bench.core.system import ROOT, clean_env
from webapi.config import ApiConfig

WORKERS = 2
THREADS = 8
FIRST_PORT, LAST_PORT = 8700, 8799
START_TIMEOUT = 30.0
STOP_GRACE = 15.0
#: Interval of the RSS samples of the server's workers during a POST.
RSS_POLL = 0.005
#: The servers of the GET load, by label: extra environment of each. wrk reads one task over
#: and over, so with the default cache nearly every GET reuses the first errors; the
#: cache-off server reads them on every request (the cost of an uncached status read).
CACHED = f"errors cache {ApiConfig().errors_cache_seconds:g} s"
UNCACHED = "errors cache off"
VARIANTS: dict[str, dict[str, str]] = {
    CACHED: {},
    UNCACHED: {"ASYNCTASK_API_ERRORS_CACHE_SECONDS": "0"},
}


class ApiServer:
    """``with ApiServer(...) as api:`` ``python -m asynctask api`` on a free port, ready to serve."""

    def __init__(
        self,
        kind: str,
        database_url: str,
        redis_url: str,
        workdir: Path,
        variant: str = CACHED,
        threads: int = THREADS,
        env: dict[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.threads = threads
        self.variant = variant
        self.database_url = database_url
        self.redis_url = redis_url
        self.extra_env = {**VARIANTS[variant], **(env or {})}
        self.label = kind if variant == CACHED else f"{kind}, {variant}"
        slug = "".join(c if c.isalnum() else "-" for c in variant)
        self.log = workdir / f"api-{kind}-{slug}.log"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def __enter__(self) -> ApiServer:
        self.port = free_port(FIRST_PORT, LAST_PORT)
        argv = [
            sys.executable, "-m", "asynctask", "api", "--host", "127.0.0.1", "--port", str(self.port),
            "--workers", str(WORKERS), "--threads", str(self.threads),
        ]  # fmt: skip
        env = clean_env(
            ASYNCTASK_DATABASE_URL=self.database_url,
            ASYNCTASK_REDIS_URL=self.redis_url,
            ASYNCTASK_REQUIRE="bench.api.jobs",
            PYTHONPATH=str(ROOT),
            **self.extra_env,
        )
        self._proc = procs.spawn(argv, env=env, cwd=ROOT, log=self.log)
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            procs.stop(self._proc, grace=STOP_GRACE)
            self._proc = None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                code = self._proc.returncode
                raise RuntimeError(
                    f"API server ({self.label}) exited with {code}: {procs.log_line(self.log)}"
                )
            try:
                status, body = self.request("GET", "/readyz")
                if status == 200 and len(self.worker_pids()) == WORKERS:
                    return
                last = f"{status} {body[:200]!r}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.1)
        raise RuntimeError(
            f"API server ({self.label}) not ready after {START_TIMEOUT:.0f} s ({last}): "
            f"{procs.log_line(self.log)}"
        )

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def worker_pids(self) -> list[int]:
        try:
            return [child.pid for child in psutil.Process(self.pid).children()]
        except psutil.Error:
            return []

    def cpu(self) -> float:
        return procs.tree_usage(self.pid, memory=False).cpu


class RssSampler:
    """Peak RSS of some processes, sampled in a thread between ``start()`` and ``stop()``."""

    def __init__(self, pids: list[int]) -> None:
        self.procs = [psutil.Process(pid) for pid in pids]
        self.base = {p.pid: self._rss(p) for p in self.procs}
        self.peak = dict(self.base)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)

    @staticmethod
    def _rss(proc: psutil.Process) -> int:
        try:
            return int(proc.memory_info().rss)
        except psutil.Error:
            return 0

    def _sample(self) -> None:
        while not self._stop.wait(RSS_POLL):
            for proc in self.procs:
                self.peak[proc.pid] = max(self.peak[proc.pid], self._rss(proc))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for proc in self.procs:
            self.peak[proc.pid] = max(self.peak[proc.pid], self._rss(proc))

    @property
    def growth(self) -> int:
        """The largest rise of any one process (the worker that served the request)."""
        return max((self.peak[pid] - self.base[pid] for pid in self.base), default=0)

    @property
    def before(self) -> int:
        """RSS before the request of the process that grew most."""
        if not self.base:
            return 0
        pid = max(self.base, key=lambda p: self.peak[p] - self.base[p])
        return self.base[pid]
