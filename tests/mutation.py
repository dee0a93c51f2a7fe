"""Mutation testing of one core module with mutmut (see docs/mutation-testing.md).

    python -m tests.mutation asynctask/worker/retry.py            # try every mutant not tried yet
    python -m tests.mutation asynctask/worker/retry.py --retry    # try the survivors again
    python -m tests.mutation asynctask/worker/retry.py --fresh    # forget earlier results first

mutmut makes one small change at a time in the module (a mutant), runs the tests that call
the changed function, and reports the mutants no test noticed. It reads its settings from the
working directory's ``pyproject.toml`` only, so each module gets a directory of its own,
``.mutation/<module>/`` (ignored by git): links to the sources and tests, and a
``pyproject.toml`` with the module and its tests (``[tool.asynctask.mutation]`` of the
repository's). Its results stay there between runs: a function whose code did not change keeps
its mutants' verdicts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"
#: What the tests need besides ``tests/`` and ``pyproject.toml`` (mutmut copies those itself).
LINKED = ("asynctask", "webapi", "tests", "migrations", "alembic.ini")
#: mutmut's verdicts that mean a test noticed the mutant.
CAUGHT = ("killed", "caught by type check")


def mutation_settings() -> dict[str, Any]:
    tables: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mutation: dict[str, Any] = tables["tool"]["asynctask"]["mutation"]
    return mutation


def workdir(module: str) -> Path:
    return WORK / module.removesuffix(".py").replace("/", ".")


def prepare(module: str, fresh: bool) -> Path:
    """The module's working directory, with its links and its mutmut settings."""
    config = mutation_settings()
    tests: list[str] | None = config["tests"].get(module)
    if tests is None:
        known = ", ".join(sorted(config["tests"]))
        raise SystemExit(f"no tests are listed for {module} in [tool.asynctask.mutation.tests]: {known}")
    directory = workdir(module)
    if fresh:
        shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(ROOT / name)
    mutmut = {
        "source_paths": ["asynctask", "webapi"],
        "only_mutate": [module],
        "also_copy": ["migrations", "alembic.ini"],
        "pytest_add_cli_args": config["pytest_args"],
        "pytest_add_cli_args_test_selection": tests,
    }
    table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in mutmut.items())
    # The repository's own settings (pytest's above all), plus mutmut's for this module.
    (directory / "pyproject.toml").write_text(
        (ROOT / "pyproject.toml").read_text() + f"\n[tool.mutmut]\n{table}\n"
    )
    return directory


def mutmut(directory: Path, *argv: str, capture: bool = False) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", *argv],
        cwd=directory,
        check=False,
        text=True,
        stdout=subprocess.PIPE if capture else None,
    )
    if done.returncode != 0:
        raise SystemExit(f"mutmut {' '.join(argv)} failed ({done.returncode})")
    return done.stdout or ""


def uncaught(directory: Path) -> dict[str, str]:
    """Mutant name -> verdict, for every mutant no test noticed (survived, no tests, timeout...)."""
    found = {}
    for line in mutmut(directory, "results", capture=True).splitlines():
        name, _, verdict = line.strip().rpartition(": ")
        if name and verdict not in CAUGHT:
            found[name] = verdict
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.splitlines()[0])
    parser.add_argument("module", help="a path listed in [tool.asynctask.mutation.tests]")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--retry", action="store_true", help="try the mutants that survived last time again")
    when.add_argument("--fresh", action="store_true", help="forget the results of earlier runs first")
    parser.add_argument("--max-children", type=int, default=2, help="mutants tried at once (default 2)")
    args = parser.parse_args(argv)

    directory = prepare(args.module, args.fresh)
    names = sorted(uncaught(directory)) if args.retry and (directory / "mutants").exists() else []
    if args.retry and not names:
        print("no surviving mutant to try again")
    else:
        mutmut(directory, "run", "--max-children", str(args.max_children), *names)
    left = uncaught(directory)
    print(f"\n{len(left)} mutant(s) of {args.module} no test noticed:")
    for name, verdict in sorted(left.items()):
        print(f"\n{mutmut(directory, 'show', name, capture=True).rstrip()}\n({verdict})")


if __name__ == "__main__":
    main()
