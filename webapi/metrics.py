"""What ``GET /metrics`` reports: the broker's state as Prometheus metric families, read at each
scrape through the read API (``asynctask.api``), and the tracking database's tasks by status.

A scrape costs a fixed number of round trips plus one per queue (its latency), whatever the
number of jobs: the counters and sizes come from ``Stats`` (two round trips on Redis, two
statements in SQL), the processes from ``ProcessSet``, and the tracking backlog from the
Redis stream's length and its oldest entry. The tasks by status are one statement, a pass
over the task table that reads no event. The requests' durations are ``webapi.requestmetrics``'.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine

from asynctask.api import ProcessSet, Queue, Stats
from asynctask.settings import Settings
from asynctask.tracking import setaside
from asynctask.tracking.counts import tasks_by_status


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
        yield CounterMetricFamily(
            "asynctask_data_losses",
            "Times a worker found that Redis had lost its data (restarted empty, flushed).",
            value=stats.data_losses,
        )
        sets = GaugeMetricFamily(
            "asynctask_set_size", "Jobs in the scheduled, retry, dead and stopped sets.", labels=["set"]
        )
        sets.add_metric(["scheduled"], stats.scheduled_size)
        sets.add_metric(["retry"], stats.retry_size)
        sets.add_metric(["dead"], stats.dead_size)
        sets.add_metric(["stopped"], stats.stopped_size)
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


class TaskCollector(Collector):
    """Counts the tasks of the tracking database by status anew at every ``collect``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterable[Metric]:
        with self.engine.connect() as connection:
            counted = tasks_by_status(connection)
            refused = setaside.count(connection)
        tasks = GaugeMetricFamily(
            "asynctask_tasks",
            "Tasks in the tracking database, by the status the API reports.",
            labels=["status"],
        )
        for status, count in counted.items():
            tasks.add_metric([status], count)
        yield tasks
        yield GaugeMetricFamily(
            "asynctask_tracking_set_aside",
            "Tracking transitions the database refused for their data, kept aside.",
            value=refused,
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
    loop_lag = GaugeMetricFamily(
        "asynctask_process_event_loop_lag_seconds",
        "The longest the process's event loop (its async jobs') was late between its last two heartbeats.",
        labels=["identity", "hostname"],
    )
    for process in live:
        busy.add_metric([process.identity, process.hostname], process.busy)
        concurrency.add_metric([process.identity, process.hostname], process.concurrency)
        loop_lag.add_metric([process.identity, process.hostname], process.loop_lag_us / 1_000_000)
    yield busy
    yield concurrency
    yield loop_lag
