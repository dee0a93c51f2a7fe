"""The runtime section of RESULTS.md and stdout, and ``runtime.json``.

Every figure is the median of the repetitions with (min-max) beside it. Ratios are taken
per repetition, between runs that were interleaved (A B, then B A, ...), and only then summarised:
on a shared, noisy machine two runs seconds apart compare better than two medians.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.core import document
from bench.core.fmt import fixed, rate, ratio, spread, table, titled
from bench.core.report import USAGE_COLUMNS, per_job_us, usage_cells
from bench.runtime.asynctask_system import AT_REF_PREFIX
from bench.runtime.runner import EnqueueRun, ProcessRun

MIB = 2**20


#: The systems that are not Python peers: ours, the Ruby reference and Node's BullMQ.
NOT_PYTHON_PEERS = ("AsyncTask", "Sidekiq", "BullMQ")
#: A worker configuration: (processes, job slots per process).
Config = tuple[int, int]


@dataclass
class Results:
    settings: dict[str, Any]
    configs: dict[str, list[str]]
    #: (repetition, run), in the order they ran.
    process: list[tuple[int, ProcessRun]] = field(default_factory=list)
    single: list[tuple[int, EnqueueRun]] = field(default_factory=list)
    #: The separate pass that counts Redis commands per job (one run per system).
    commands: list[ProcessRun] = field(default_factory=list)
    #: Systems asked for that could not run here, with the exact reason.
    skipped: dict[str, str] = field(default_factory=dict)

    def systems(self) -> list[str]:
        return list(dict.fromkeys(run.system for _, run in self.process))

    def configurations(self) -> list[Config]:
        return list(dict.fromkeys((run.processes, run.concurrency) for _, run in self.process))

    def runs(self, system: str, config: Config) -> list[ProcessRun]:
        return [r for _, r in self.process if r.system == system and _config(r) == config and not r.error]

    def errors(self) -> list[str]:
        runs = [r for _, r in self.process] + self.commands
        return [f"{r.system} {_label(_config(r))}: {r.error}" for r in runs if r.error]


def _config(run: ProcessRun) -> Config:
    return run.processes, run.concurrency


def _label(config: Config) -> str:
    processes, concurrency = config
    return f"{processes} proc x {concurrency}"


def processing_table(results: Results) -> list[str]:
    header = [
        "system", "workers", "N", "enqueue jobs/s (bulk)", "process jobs/s steady",
        "process jobs/s incl. start-up", "start-up s", "peak RSS of one worker MiB (all: RSS, PSS)",
        "CPU µs/job workers + redis", "TERM → exit s",
    ]  # fmt: skip
    rows = []
    for config in results.configurations():
        for system in results.systems():
            runs = results.runs(system, config)
            if not runs:
                rows.append([system, _label(config), "", "failed", "", "", "", "", "", ""])
                continue
            one = statistics.median(r.peak_worker_rss for r in runs) / MIB
            rss = statistics.median(r.peak_rss for r in runs) / MIB
            pss = statistics.median(r.peak_pss for r in runs) / MIB
            cpu_worker = statistics.median(r.worker_steady.cpu / r.jobs for r in runs) * 1e6
            cpu_redis = statistics.median(r.redis_steady.cpu / r.jobs for r in runs) * 1e6
            rows.append(
                [
                    system,
                    _label(config),
                    str(runs[0].jobs),
                    spread((r.enqueue.rate for r in runs), rate),
                    f"**{spread((r.steady_rate for r in runs), rate)}**",
                    spread((r.total_rate for r in runs), rate),
                    spread((r.startup_s for r in runs), fixed(2)),
                    f"{one:.0f} ({rss:.0f}, {pss:.0f})",
                    f"{cpu_worker:.0f} + {cpu_redis:.0f}",
                    spread((r.stop_s for r in runs), fixed(1)),
                ]
            )
    return table(header, rows)


def scaling_table(results: Results) -> list[str]:
    """Steady jobs/s by worker processes, one row per system and slots per process."""
    processes = list(dict.fromkeys(p for p, _ in results.configurations()))
    if len(processes) < 2:
        return []
    lines = [
        f"| system | slots per process | {' | '.join(f'{p} proc' for p in processes)} "
        f"| {processes[-1]} ÷ {processes[0]} |",
        "|---|---|" + "---|" * (len(processes) + 1),
    ]
    for concurrency in dict.fromkeys(c for _, c in results.configurations()):
        for system in results.systems():
            medians = [
                statistics.median(r.steady_rate for r in runs) if runs else 0.0
                for runs in (results.runs(system, (p, concurrency)) for p in processes)
            ]
            ran = [
                any(r.system == system and _config(r) == (p, concurrency) for _, r in results.process)
                for p in processes
            ]
            cells = [
                rate(m) if m else ("failed" if tried else "-") for m, tried in zip(medians, ran, strict=True)
            ]
            gain = ratio(medians[-1] / medians[0]) if medians[0] and medians[-1] else "-"
            lines.append(f"| {system} | {concurrency} | {' | '.join(cells)} | {gain} |")
    return lines


def cost_table(results: Results) -> list[str]:
    """Where a worker's time goes per job: user vs kernel CPU, and how often its threads switch."""
    rows = []
    for config in results.configurations():
        for system in results.systems():
            runs = results.runs(system, config)
            if runs:
                rows.append(
                    [
                        system,
                        _label(config),
                        *usage_cells(runs),
                        per_job_us(runs, lambda r: r.redis_steady.cpu),
                    ]
                )
    return table(["system", "workers", *USAGE_COLUMNS, "redis-server CPU µs/job"], rows)


def enqueue_table(results: Results) -> list[str]:
    single_jobs = results.settings["single_jobs"]
    single_title = (
        f"one call per job, jobs/s (N = {single_jobs})" if single_jobs else "one call per job (not run)"
    )
    stall_title = "its event loop's longest stall, ms"
    header = f"| system | bulk enqueue jobs/s (N as above) | {single_title} | {stall_title} |"
    lines = [header, "|---|---|---|---|"]
    for system in results.systems():
        bulk = [r.enqueue.rate for _, r in results.process if r.system == system]
        single = [r.rate for _, r in results.single if r.system == system]
        stalls = [r.stall_ms for _, r in results.single if r.system == system and r.stall_ms is not None]
        stall = spread(stalls, lambda ms: f"{ms:.1f}")
        lines.append(f"| {system} | {spread(bulk, rate)} | {spread(single, rate)} | {stall} |")
    return lines


def fastest_python_peer(runs: dict[str, ProcessRun]) -> ProcessRun | None:
    """The Python peer with the best steady drain rate in one repetition's ``runs``."""
    peers = [run for name, run in runs.items() if is_python_peer(name)]
    return max(peers, key=lambda run: run.steady_rate, default=None)


def is_reference(system: str) -> bool:
    """Whether ``system`` is AsyncTask at the ``--ab`` commit."""
    return system.startswith(AT_REF_PREFIX)


def is_python_peer(system: str) -> bool:
    return system not in NOT_PYTHON_PEERS and not is_reference(system)


def paired(
    results: Results, config: Config, other: str, metric: Callable[[ProcessRun], float]
) -> list[float]:
    """AsyncTask ÷ ``other`` of ``metric``, one value per repetition where both ran.

    ``other`` = ``FASTEST_PYTHON`` compares with the Python peer that drained fastest in
    each repetition (for every metric, that same peer's value).
    """
    by_rep: dict[int, dict[str, ProcessRun]] = {}
    for rep, run in results.process:
        if _config(run) == config and not run.error:
            by_rep.setdefault(rep, {})[run.system] = run
    ratios = []
    for runs in by_rep.values():
        if "AsyncTask" not in runs:
            continue
        peer = fastest_python_peer(runs) if other == FASTEST_PYTHON else runs.get(other)
        if peer is not None and metric(peer) > 0:
            ratios.append(metric(runs["AsyncTask"]) / metric(peer))
    return ratios


FASTEST_PYTHON = "fastest Python peer"


#: What the A/B table compares, by column: (heading, the value of one run).
AB_METRICS: tuple[tuple[str, Callable[[ProcessRun], float]], ...] = (
    ("steady jobs/s", lambda r: r.steady_rate),
    ("jobs/s incl. start-up", lambda r: r.total_rate),
    ("worker CPU per job (lower is better)", lambda r: r.worker_steady.cpu / r.jobs),
    ("peak RSS of one worker (lower is better)", lambda r: float(r.peak_worker_rss)),
    ("start-up s (lower is better)", lambda r: r.startup_s),
)


def ab_table(results: Results) -> list[str]:
    """This tree's AsyncTask ÷ AsyncTask at the ``--ab`` commit, per configuration, each ratio
    taken per repetition."""
    references = [s for s in results.systems() if is_reference(s)]
    if "AsyncTask" not in results.systems():
        return []
    lines: list[str] = []
    for reference in references:
        lines += [
            f"| AsyncTask ÷ {reference} | " + " | ".join(heading for heading, _ in AB_METRICS) + " |",
            "|---|" + "---|" * len(AB_METRICS),
        ]
        for config in results.configurations():
            cells = [spread(paired(results, config, reference, metric), ratio) for _, metric in AB_METRICS]
            lines.append(f"| {_label(config)} | {' | '.join(cells)} |")
    return lines


def ratio_table(results: Results) -> list[str]:
    others = [s for s in results.systems() if s != "AsyncTask" and not is_reference(s)]
    if "AsyncTask" not in results.systems() or not others:
        return []
    if any(is_python_peer(s) for s in others):
        others.append(FASTEST_PYTHON)
    configs = results.configurations()
    lines = [
        "| AsyncTask ÷ | " + " | ".join(f"steady, {_label(c)}" for c in configs) + " | incl. start-up, "
        f"{_label(configs[0])} | worker CPU per job, {_label(configs[0])} (lower is better) |",
        "|---|" + "---|" * (len(configs) + 2),
    ]
    for other in others:
        steady = [spread(paired(results, c, other, lambda r: r.steady_rate), ratio) for c in configs]
        total = spread(paired(results, configs[0], other, lambda r: r.total_rate), ratio)
        cpu = spread(paired(results, configs[0], other, lambda r: r.worker_steady.cpu / r.jobs), ratio)
        lines.append(f"| {other} | {' | '.join(steady)} | {total} | {cpu} |")
    return lines


def commands_table(results: Results) -> list[str]:
    rows = []
    for run in results.commands:
        if run.error:
            rows.append([run.system, str(run.jobs), "failed", "", ""])
            continue
        top = sorted(run.cmdstats.items(), key=lambda kv: -kv[1])
        breakdown = ", ".join(
            f"{name} {calls / run.jobs:.3g}" for name, calls in top if calls / run.jobs >= 0.001
        )
        rows.append(
            [
                run.system,
                str(run.jobs),
                f"{run.enqueue.redis_cmds / run.jobs:.3f}",
                f"{run.redis_cmds / run.jobs:.2f}",
                breakdown,
            ]
        )
    header = ["system", "N", "enqueue cmds/job", "process cmds/job", "process commands per job (calls ÷ N)"]
    return table(header, rows)


def tables(results: Results) -> str:
    s = results.settings
    parts = [
        f"Processing: N no-op jobs (N = {s['jobs']} unless the row says otherwise), "
        f"{s['reps']} rep(s) interleaved; median (min-max). This machine has {s['nproc']} cores: "
        "more worker processes than cores share them.",
        "",
        *processing_table(results),
    ]
    parts += titled(
        "This tree against the `--ab` commit, per repetition then median (min-max):", ab_table(results)
    )
    parts += titled("Ratios of drain throughput, per repetition then median (min-max):", ratio_table(results))
    parts += titled(
        f"Scaling: steady jobs/s by worker processes (median), on {s['nproc']} cores:", scaling_table(results)
    )
    parts += [
        "",
        "Cost per job, steady phase (first -> last job done), median (min-max):",
        "",
        *cost_table(results),
        "",
        "Enqueue (no worker running; each pass in a fresh process):",
        "",
        *enqueue_table(results),
    ]
    if results.commands:
        parts += [
            "",
            f"Redis commands per job (separate pass, 1 proc x {s['commands_concurrency']}):",
            "",
            *commands_table(results),
        ]
    parts += titled("Not run here:", [f"- {name}: {why}" for name, why in results.skipped.items()])
    parts += titled("Errors:", [f"- {e}" for e in results.errors()])
    return "\n".join(parts) + "\n"


METHOD = """\
- A private redis-server (`--save "" --appendonly no`, own port) is started for the bench
  and FLUSHALLed before every pass.
- **Enqueue**: N jobs pushed by the system's own client in a fresh process, no worker
  running; only the pushes are timed (after a PING), not interpreter start-up.
- **Processing**: after the bulk enqueue, P worker processes are spawned at once. Each job
  appends one byte to an O_APPEND marker file (one `write(2)`, the only work the job does);
  the bench polls the file's size every 2 ms. *steady* = first job done -> last job done,
  *incl. start-up* = spawn -> last job done. Rates are N divided by those times.
- Configurations run interleaved, in an order reversed every other repetition (A B C, C B A,
  ...): two systems compared run next to each other, each first half of the time.
- **Memory**: peak RSS of the largest worker process tree, sampled every 100 ms with psutil;
  in brackets the peak of all workers' summed RSS and PSS.
- **CPU µs/job**: user + system CPU of the worker tree, and of redis-server, between first
  and last job done, divided by N (with start-up: `worker_total` in the JSON). Context
  switches are summed over all threads from `/proc/PID/task/*/status` at the same instants.
- **Redis cmds/job**: change of INFO commandstats calls (the bench's own INFO left out)
  from just before the worker spawn to the last job done. Commands run inside Lua scripts
  and each command of a pipeline or MULTI count, so this is server work, not round trips:
  one AsyncTask EVALSHA that runs LREM + LMOVE counts 3.
- After each run the worker gets TERM (*TERM -> exit s* is how long it took to exit) and the
  bench checks: marker size = N (every job ran exactly once), the system's queue empty,
  AsyncTask's in-flight lists empty, and where the system keeps it, `stat:processed` = N
  (`checks` in the JSON).
- **Ratios** are taken per repetition between runs of the same configuration, then
  summarised; *fastest Python peer* is, in each repetition, the best of Celery, RQ,
  Dramatiq, arq and Huey in that repetition.
"""


def markdown(results: Results) -> str:
    """The runtime section and the two that continue it, Method and Configuration."""
    lines = [f"## {TITLE}", "", tables(results), "## Method", "", METHOD, "## Configuration", ""]
    for system, description in results.configs.items():
        lines += [f"### {system}", "", *(f"- {line}" for line in description), ""]
    return "\n".join(lines)


def raw(results: Results, machine: dict[str, str]) -> dict[str, Any]:
    def process_entry(rep: int | None, run: ProcessRun) -> dict[str, Any]:
        entry = {"rep": rep, **asdict(run), "steady_rate": run.steady_rate, "total_rate": run.total_rate}
        entry["enqueue"]["rate"] = run.enqueue.rate
        return entry

    return {
        "settings": results.settings,
        "machine": machine,
        "configs": results.configs,
        "skipped": results.skipped,
        "process": [process_entry(rep, run) for rep, run in results.process],
        "enqueue_single": [{"rep": rep, **asdict(run), "rate": run.rate} for rep, run in results.single],
        "commands": [process_entry(None, run) for run in results.commands],
    }


def write(results: Results, machine: dict[str, str], out_dir: Path) -> None:
    """``runtime.json``, and the section added to RESULTS.md; nothing when no drain ran."""
    if results.process:
        document.write_section(out_dir, TITLE, markdown(results), JSON_FILE, raw(results, machine))


TITLE = "Job runtime: no-op throughput against Sidekiq, BullMQ and the Python peers"
JSON_FILE = "runtime.json"
