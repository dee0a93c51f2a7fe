"""The Redis job systems a bench run compares, and why any of them cannot run here."""

from __future__ import annotations

import sys

from bench.core.system import System
from bench.runtime import asynctask_system, redis_peers, sidekiq_system

ALL: tuple[System, ...] = (asynctask_system.SYSTEM, sidekiq_system.SYSTEM, *redis_peers.SYSTEMS)
NAMES = tuple(system.name for system in ALL)


def available(wanted: list[str]) -> tuple[list[System], dict[str, str]]:
    """The systems of ``wanted`` (names) that can run, and the reason for each that cannot.

    Sidekiq needs Debian's ``ruby-sidekiq``; the Python peers need the peers' virtualenv,
    which this call builds (or finds up to date) first.
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
