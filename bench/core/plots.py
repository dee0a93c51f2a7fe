"""PNG plots of a bench run, drawn from the raw JSON files beside RESULTS.md.

Drawing from the JSON (not from the objects in memory) means every plot shows exactly the
data kept next to it, and ``python -m bench.core.plots DIR`` redraws them from a results folder.
Each plot is written only when its JSON file is there.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt
from matplotlib import ticker

OURS = "AsyncTask"
OUR_COLOUR = "#c0392b"
PEER_COLOUR = "#7f8c8d"
#: Line colours of the peers: matplotlib's tab10 without its red, which is ours.
PEER_LINES = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
MIB = 2**20


def _load(out_dir: Path, name: str) -> dict[str, Any] | None:
    path = out_dir / name
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _colour(system: str) -> str:
    return OUR_COLOUR if system.startswith(OURS) else PEER_COLOUR


def throughput(runtime: dict[str, Any], out: Path) -> Path | None:
    """Horizontal bars: median steady drain jobs/s of each system with one worker process."""
    runs = [r for r in runtime["process"] if not r["error"] and r.get("processes", 1) == 1]
    if not runs:
        return None
    concurrency = runs[0]["concurrency"]
    rates: dict[str, list[float]] = defaultdict(list)
    jobs: dict[str, int] = {}
    for run in runs:
        if run["concurrency"] == concurrency:
            rates[run["system"]].append(run["steady_rate"])
            jobs[run["system"]] = run["jobs"]
    common = runtime["settings"]["jobs"]
    systems = sorted(rates, key=lambda name: statistics.median(rates[name]))
    medians = [statistics.median(rates[name]) for name in systems]
    low = [m - min(rates[name]) for m, name in zip(medians, systems, strict=True)]
    high = [max(rates[name]) - m for m, name in zip(medians, systems, strict=True)]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(systems) + 1.6))
    labels = [name if jobs[name] == common else f"{name} (N = {jobs[name]:,})" for name in systems]
    ax.barh(labels, medians, xerr=[low, high], color=[_colour(s) for s in systems], capsize=3)
    for y, value in enumerate(medians):
        ax.text(value, y, f"  {value:,.0f}", va="center", fontsize=8)
    ax.set_xlabel("jobs/s, first job done → last job done (median; bars: min to max)")
    ax.set_title(
        f"No-op drain throughput, 1 worker process x {concurrency} slots, {runtime['settings']['reps']} reps",
        fontsize=10,
    )
    ax.set_xlim(0, max(medians) * 1.25)
    return _save(fig, out / "throughput.png")


def scaling(runtime: dict[str, Any], out: Path) -> Path | None:
    """Median steady jobs/s against worker processes, one line per system."""
    rates: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runtime["process"]:
        if not run["error"]:
            rates[run["system"]][run.get("processes", 1)].append(run["steady_rate"])
    processes = sorted({p for by_p in rates.values() for p in by_p})
    if len(processes) < 2:
        return None
    fig, ax = plt.subplots(figsize=(9.5, 5))
    peers = iter(PEER_LINES * 2)
    for system, by_p in rates.items():
        xs = sorted(by_p)
        ax.plot(
            xs,
            [statistics.median(by_p[x]) for x in xs],
            marker="o",
            label=system,
            linewidth=2.5 if system == OURS else 1.2,
            color=OUR_COLOUR if system == OURS else next(peers),
        )
    nproc = runtime["settings"].get("nproc", "?")
    ax.axvline(int(nproc) if str(nproc).isdigit() else 2, color="black", linestyle=":", linewidth=1)
    ax.set_xticks(processes)
    ax.set_xlabel(f"worker processes (dotted: the machine's {nproc} cores)")
    ax.set_ylabel("jobs/s, steady (median)")
    ax.set_yscale("log")
    ax.set_title("Scaling with worker processes, no-op jobs", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, out / "scaling.png")


def latency(data: dict[str, Any], out: Path) -> Path | None:
    """Cumulative distribution of enqueue → start latency per system (repetitions pooled)."""
    samples: dict[str, list[float]] = defaultdict(list)
    for run in data["runs"]:
        if not run["error"]:
            samples[run["system"]].extend(run["samples_ms"])
    if not samples:
        return None
    fig, ax = plt.subplots(figsize=(8, 5))
    peers = iter(PEER_LINES * 2)
    for system, values in samples.items():
        values.sort()
        fractions = [(i + 1) / len(values) for i in range(len(values))]
        ax.step(
            values,
            fractions,
            where="post",
            label=system,
            linewidth=2.5 if system == OURS else 1.2,
            color=OUR_COLOUR if system == OURS else next(peers),
        )
    ax.axvline(5.0, color="black", linestyle=":", linewidth=1)
    ax.axhline(0.99, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("enqueue → start, ms (log; dotted: the 5 ms p99 target; dashed: p99)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"Latency at {data['settings']['rate']:,.0f} jobs/s, 1 worker process", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, out / "latency.png")


def memory(data: dict[str, Any], out: Path) -> Path | None:
    """Grouped bars per system: RSS idle, half way and at the end of the jobs."""
    runs = [r for r in data["runs"] if not r["error"] and r["checkpoints"]]
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(9, 5))
    width = 0.27
    common = data["settings"]["jobs"]
    names = [r["system"] if r["jobs"] == common else f"{r['system']}\n(N = {r['jobs']:,})" for r in runs]
    series: list[tuple[str, Callable[[dict[str, Any]], float]]] = [
        ("idle", lambda r: float(r["idle_rss"])),
        ("after half the jobs", lambda r: _checkpoint(r, 0.5)),
        ("after all jobs", lambda r: float(r["checkpoints"][-1][1])),
    ]
    for offset, (label, value) in enumerate(series):
        xs = [i + (offset - 1) * width for i in range(len(runs))]
        ax.bar(xs, [value(r) / MIB for r in runs], width, label=label)
    ax.set_xticks(range(len(runs)), names, rotation=20, fontsize=8)
    ax.set_ylabel("RSS of the worker's process tree, MiB")
    ax.set_title(f"Worker memory: idle, then while running N = {common:,} no-op jobs", fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, out / "memory.png")


def _checkpoint(run: dict[str, Any], fraction: float) -> float:
    """RSS at the first checkpoint with at least ``fraction`` of the jobs done."""
    for done, rss, *_ in run["checkpoints"]:
        if done >= fraction * run["jobs"]:
            return float(rss)
    return float(run["checkpoints"][-1][1])


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(out_dir: Path) -> list[Path]:
    """Every plot whose data is in ``out_dir``; returns the files written."""
    written: list[Path | None] = []
    if (runtime := _load(out_dir, "runtime.json")) is not None:
        written += [throughput(runtime, out_dir), scaling(runtime, out_dir)]
    if (latency_data := _load(out_dir, "latency.json")) is not None:
        written.append(latency(latency_data, out_dir))
    if (memory_data := _load(out_dir, "memory.json")) is not None:
        written.append(memory(memory_data, out_dir))
    return [path for path in written if path is not None]


if __name__ == "__main__":
    for written_path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results")):
        print(written_path)
