"""The distribution's name installs this project: a wheel built from the checkout, installed by
name into a fresh virtualenv, gives the ``asynctask`` package and command of this repository.

The package index holds an unrelated ``asynctask``; this project's distribution is named
``asynctask-jobs`` (the import package stays ``asynctask``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAME = "asynctask-jobs"


def test_the_project_is_named_as_the_readme_says() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == NAME
    readme = (ROOT / "README.md").read_text()
    assert f"`{NAME}`" in readme
    assert "pip install asynctask " not in readme and "pip install asynctask\n" not in readme


@pytest.mark.slow
def test_pip_install_of_the_name_from_a_built_wheel_installs_this_project(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        check=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("*.whl")
    assert wheel.name.startswith("asynctask_jobs-")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # Without PYTHONPATH: a test run that points it at the checkout would have the fresh
    # virtualenv import the checkout's asynctask instead of the installed one.
    fresh = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--find-links", str(wheels), NAME],
        check=True,
        timeout=600,
        env=fresh,
    )
    shown = subprocess.run(
        [
            str(python),
            "-c",
            "import asynctask, webapi; print(asynctask.__file__); print(asynctask.__version__)",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        # Not the checkout: Python would import its asynctask/ from the working directory.
        cwd=tmp_path,
        env=fresh,
    ).stdout.split()
    assert shown[0].startswith(str(venv)) and shown[1] == asynctask_version()
    # The command line is this project's, with the API server's command its entry point adds.
    usage = subprocess.run(
        [str(venv / "bin" / "asynctask"), "--help"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        env=fresh,
    ).stdout
    assert "worker" in usage and "api" in usage


def asynctask_version() -> str:
    import asynctask

    return asynctask.__version__
