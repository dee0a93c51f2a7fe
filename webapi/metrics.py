"""What ``GET /metrics`` reports: the broker's state as Prometheus metric families, read at each
scrape through the read API (``asynctask.api``).

A scrape costs a fixed number of round trips plus one per queue (its latency), whatever the
number of jobs: the counters and sizes come from ``Stats`` (two round trips on Redis, two
statements in SQL), the processes from ``ProcessSet``, and the tracking backlog from the
Redis stream's length and its oldest entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from asynctask.api import ProcessSet, Queue, Stats
from asynctask.settings import Settings


class BrokerCollector(Collector):
    """Reads the broker of ``settings`` anew at every ``collect``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def collect(self) -> Iterable[Metric]:
        stats = Stats(settings=self.settings)
        yield CounterMetricFamily(
            "asynctask_jobs_processed", "Jobs that ended, over the broker's life.", value=stats.processed
        )
        yield CounterMetricFamily(
            "asynctask_jobs_failed", "Job runs that failed, over the broker's life.", value=stats.failed
        )
        sets = GaugeMetricFamily(
            "asynctask_set_size", "Jobs in the scheduled, retry and dead sets.", labels=["set"]
        )
        sets.add_metric(["scheduled"], stats.scheduled_size)
        sets.add_metric(["retry"], stats.retry_size)
        sets.add_metric(["dead"], stats.dead_size)
        yield sets
        yield from _queues(Queue.all(settings=self.settings))
        yield from _processes(ProcessSet(settings=self.settings))
        backlog = stats.tracking_backlog()
        if backlog is not None:
            yield GaugeMetricFamily(
                "asynctask_tracking_backlog",
                "Tracked transitions waiting for the flusher to apply them to the tracking database.",
                value=backlog.entries,
            )
            yield GaugeMetricFamily(
                "asynctask_tracking_lag_seconds",
                "Seconds the oldest transition waiting for the flusher has waited (0 when none waits).",
                value=backlog.age,
            )


def _queues(queues: list[Queue]) -> Iterator[Metric]:
    sizes = GaugeMetricFamily("asynctask_queue_size", "Jobs waiting in the queue.", labels=["queue"])
    latencies = GaugeMetricFamily(
        "asynctask_queue_latency_seconds",
        "Seconds the queue's oldest waiting job has waited since it was enqueued (0 when empty).",
        labels=["queue"],
    )
    for queue in queues:
        sizes.add_metric([queue.name], queue.size)
        latencies.add_metric([queue.name], queue.latency)
    yield sizes
    yield latencies


def _processes(processes: ProcessSet) -> Iterator[Metric]:
    live = processes.processes()
    yield GaugeMetricFamily("asynctask_processes", "Live worker processes.", value=len(live))
    busy = GaugeMetricFamily(
        "asynctask_process_busy", "Threads of the process running a job.", labels=["identity", "hostname"]
    )
    concurrency = GaugeMetricFamily(
        "asynctask_process_concurrency", "Job threads of the process.", labels=["identity", "hostname"]
    )
    for process in live:
        busy.add_metric([process.identity, process.hostname], process.busy)
        concurrency.add_metric([process.identity, process.hostname], process.concurrency)
    yield busy
    yield concurrency
