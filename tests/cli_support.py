"""Running ``asynctask`` commands in the test's process, as a shell would run them."""

from __future__ import annotations

import os

import pytest

from asynctask.cli import main


def without_asynctask_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset every ASYNCTASK_* variable and REDIS_URL: a command reads its options alone."""
    for name in list(os.environ):
        if name.startswith("ASYNCTASK_") or name == "REDIS_URL":
            monkeypatch.delenv(name)


def run_cli(argv: list[str], captured: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``asynctask argv...``: its exit status and what it printed since the last read of ``captured``."""
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse: usage errors, --help, --version
        status = int(exc.code or 0)
    out, err = captured.readouterr()
    return status, out, err
