"""The peers' virtualenv: every Python peer of the bench, never a project dependency.

Huey and procrastinate (sql section), Celery, RQ, Dramatiq and Huey on Redis (runtime section;
arq, whose redis-py pin clashes with Celery's, has a venv of its own:
``bench/runtime/redis_peers.py``).
``bench/.peers-venv`` (git-ignored) is created by the bench itself from
``bench/peers/requirements.txt`` with pip, and rebuilt when that file changes (a copy of it
inside the venv tells). Peers' scripts and workers run with this venv's interpreter;
AsyncTask runs from the project's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bench.core.system import ROOT, clean_env

VENV = ROOT / "bench" / ".peers-venv"
PEERS_DIR = ROOT / "bench" / "peers"
REQUIREMENTS = PEERS_DIR / "requirements.txt"
#: The distributions whose versions the sql section gives (``redis_peers`` gives the others').
PACKAGES = ("huey", "procrastinate", "psycopg", "psycopg-binary", "psycopg-pool")


def bin_path(name: str) -> Path:
    return VENV / "bin" / name


def python() -> Path:
    return bin_path("python")


def ensure() -> float:
    """Create or refresh the venv if the requirements changed; return the seconds it took.

    Raises ``RuntimeError`` with pip's output when the install fails.
    """
    return build(VENV, REQUIREMENTS.read_text(encoding="utf-8"), ["-r", str(REQUIREMENTS)])


def build(venv: Path, wanted: str, pip_args: list[str]) -> float:
    """Create or refresh ``venv`` with ``pip install pip_args`` unless it was built from the
    same ``wanted`` (the requirements' text, kept in the venv); return the seconds it took."""
    stamp = venv / "bench-requirements.txt"
    interpreter = venv / "bin" / "python"
    if interpreter.exists() and stamp.exists() and stamp.read_text(encoding="utf-8") == wanted:
        return 0.0
    start = time.monotonic()
    _run([sys.executable, "-m", "venv", "--clear", str(venv)])
    _run([str(interpreter), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pip_args])
    # Written last: an interrupted install is redone next time.
    stamp.write_text(wanted, encoding="utf-8")
    return time.monotonic() - start


def versions(packages: tuple[str, ...] = PACKAGES, interpreter: Path | None = None) -> dict[str, str]:
    """``packages``' versions and the Python version (key "python") in a venv (default: this one)."""
    script = (
        "import json, importlib.metadata as m, platform; "
        f"print(json.dumps({{p: m.version(p) for p in {list(packages)!r}}} "
        "| {'python': platform.python_version()}))"
    )
    out = _run([str(interpreter or python()), "-c", script])
    found: dict[str, str] = json.loads(out)
    return found


def env(**extra: str) -> dict[str, str]:
    """The environment of a peer's script or worker: its app modules importable."""
    return clean_env(PYTHONPATH=str(PEERS_DIR), **extra)


def _run(argv: list[str]) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=clean_env(), cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{argv[0]} {argv[1:3]} failed ({out.returncode}): {out.stderr.strip()[-1500:]}")
    return out.stdout
