"""The facts a reader needs to compare two runs: machine, load, versions, commit."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata

import psutil

from bench.core.redis_server import RedisServer
from bench.core.system import ROOT, System


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def describe(server: RedisServer, systems: list[System], load_at_start: str) -> dict[str, str]:
    info = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "memory": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        # Other work on the machine shows here; the bench cannot stop it, only report it.
        "load average (1/5/15 min) at start, at end": f"{load_at_start}, {load_average()}",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "asynctask": f"{package_version('asynctask-jobs')} (commit {_git_commit()})",
        # Others edit the library while benches run: "-dirty" alone cannot tell two runs apart.
        "asynctask source sha256 (asynctask/**/*.py, *.lua)": _source_digest(),
        "redis-py": package_version("redis"),
        "hiredis": package_version("hiredis"),
        "psutil": package_version("psutil"),
        "redis-server": server.version(),
    }
    for system in systems:
        info.update(system.versions())
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_version(package: str) -> str:
    """The installed version of ``package``, or "not installed"."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _source_digest() -> str:
    digest = hashlib.sha256()
    package = ROOT / "asynctask"
    for path in sorted(p for p in package.rglob("*") if p.suffix in (".py", ".lua")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"
