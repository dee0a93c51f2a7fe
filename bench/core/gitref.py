"""A commit of this repository written out as files, to run it beside this tree."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from bench.core.system import ROOT


def commit_of(ref: str, command: str) -> str:
    """The short commit git ``ref`` names. Raises ``SystemExit``, naming ``command``, when it
    names none."""
    return _git(command, "rev-parse", "--verify", "--short=10", f"{ref}^{{commit}}").decode().strip()


def export(commit: str, into: Path, *paths: str, command: str) -> None:
    """Write the files of ``commit`` (only ``paths``, if named) into ``into``."""
    with tarfile.open(fileobj=io.BytesIO(_git(command, "archive", commit, *paths))) as archive:
        archive.extractall(into, filter="data")


def _git(command: str, *args: str) -> bytes:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=False)
    except OSError as exc:
        raise SystemExit(f"{command}: cannot run git: {exc}") from None
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip()
        raise SystemExit(f"{command}: git {args[0]} failed: {detail}")
    return done.stdout
