"""Ruby Sidekiq 6.4 under test: ``push_bulk``/``perform_async`` to enqueue, ``sidekiq`` to process."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from bench.core.system import ROOT, System, clean_env, marker_env

RUBY_DIR = ROOT / "bench" / "runtime" / "ruby"


def available() -> bool:
    """Whether ``ruby`` and ``sidekiq`` are on PATH (CI without Ruby skips Sidekiq)."""
    return shutil.which("ruby") is not None and shutil.which("sidekiq") is not None


class Sidekiq(System):
    name = "Sidekiq"
    processed_stat = True

    def enqueue_argv(self, url: str, mode: str, jobs: int, batch: int) -> list[str]:
        return ["ruby", str(RUBY_DIR / "enqueue.rb"), mode, str(jobs), str(batch)]

    def latency_argv(self, url: str, jobs: int, rate: float) -> list[str]:
        return ["ruby", str(RUBY_DIR / "enqueue.rb"), "latency", str(jobs), repr(rate)]

    def worker_argv(self, concurrency: int) -> list[str]:
        return [
            "sidekiq",
            "-r",
            "./bench/runtime/ruby/noop_worker.rb",
            "-c",
            str(concurrency),
            "-q",
            "default",
        ]

    def env(self, url: str, marker: Path | None) -> dict[str, str]:
        return clean_env(REDIS_URL=url, **marker_env(marker))

    def versions(self) -> dict[str, str]:
        """Ruby, Sidekiq, redis-rb and the redis-rb driver, as the worker sees them."""
        script = (
            'require "sidekiq"; print [RUBY_VERSION, Sidekiq::VERSION, Redis::VERSION, '
            'Redis::Connection.drivers.last.name].join(" ")'
        )
        try:
            out = subprocess.run(
                ["ruby", "-e", script], capture_output=True, text=True, check=True, timeout=30
            )
        except (OSError, subprocess.SubprocessError):
            return {}
        ruby, sidekiq, redis_rb, driver = out.stdout.split()
        return {"ruby": ruby, "sidekiq": sidekiq, "redis-rb": redis_rb, "redis-rb driver": driver}

    def describe(self) -> list[str]:
        return [
            "enqueue: `Sidekiq::Client.push_bulk` with 1000 jobs per call (pipelined SADD + LPUSH); "
            "single: `NoopWorker.perform_async` in a loop; "
            "latency: `LatencyWorker.perform_async(Time.now.to_f)`, one call per job at the paced times",
            "worker: `sidekiq -r ./bench/runtime/ruby/noop_worker.rb -c C -q default`, `REDIS_URL` set",
            "`Sidekiq.logger.level = WARN` (6.4 logs start/done per job at INFO; AsyncTask logs nothing "
            "per job), `Redis.silence_deprecations = true` (redis-rb 4.8 warns on every SADD)",
            "defaults otherwise: retry middleware, BasicFetch (BRPOP, 2 s timeout; not crash-safe), "
            "heartbeat every 5 s, redis-rb 4.8 pure-Ruby driver, connection pool of concurrency + 5",
        ]


SYSTEM = Sidekiq()
