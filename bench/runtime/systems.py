"""The Redis job systems a bench run compares, and why any of them cannot run here."""

from __future__ import annotations

import sys

from bench.core.system import System
from bench.runtime import asynctask_system, bullmq_system, redis_peers, sidekiq_system

ALL: tuple[System, ...] = (
    asynctask_system.SYSTEM,
    asynctask_system.ASYNC_SYSTEM,
    sidekiq_system.SYSTEM,
    bullmq_system.SYSTEM,
    *redis_peers.SYSTEMS,
)
NAMES = tuple(system.name for system in ALL)


def available(wanted: list[str]) -> tuple[list[System], dict[str, str]]:
    """The systems of ``wanted`` (names) that can run, and the reason for each that cannot.

    Sidekiq needs Debian's ``ruby-sidekiq``; BullMQ needs Node and npm, and its packages, which
    this call installs (or finds up to date) first, as it does the Python peers' virtualenv.
    """
    unknown = set(wanted) - set(NAMES)
    if unknown:
        raise SystemExit(f"--systems: unknown {sorted(unknown)}; known: {', '.join(NAMES)}")
    chosen = [system for system in ALL if system.name in wanted]
    skipped: dict[str, str] = {}
    if sidekiq_system.SYSTEM in chosen and not sidekiq_system.available():
        skipped[sidekiq_system.SYSTEM.name] = (
            "`ruby` or `sidekiq` not on PATH: install Debian's ruby-sidekiq (apt-get install ruby-sidekiq)"
        )
    if bullmq_system.SYSTEM in chosen:
        if not bullmq_system.available():
            skipped[bullmq_system.SYSTEM.name] = "`node` or `npm` not on PATH: install Debian's nodejs, npm"
        else:
            try:
                seconds = bullmq_system.ensure()
            except RuntimeError as exc:
                skipped[bullmq_system.SYSTEM.name] = f"its packages could not be installed: {exc}"
            else:
                if seconds:
                    print(f"installed BullMQ's packages in {seconds:.0f} s", file=sys.stderr)
    if any(system in chosen for system in redis_peers.SYSTEMS):
        try:
            seconds = redis_peers.ensure()
        except RuntimeError as exc:
            for system in redis_peers.SYSTEMS:
                skipped[system.name] = f"the peers' virtualenv could not be built: {exc}"
        else:
            if seconds:
                print(f"built the peers' virtualenv in {seconds:.0f} s", file=sys.stderr)
    return [system for system in chosen if system.name not in skipped], skipped
