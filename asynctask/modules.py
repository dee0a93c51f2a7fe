"""Loading the modules that register jobs (``-r`` / ``ASYNCTASK_REQUIRE``), named by the operator.

Only the operator names modules; a payload never does (see ``asynctask.registry``).

A ``.py`` path is run as a module named after the file, with the file's own directory on
``sys.path`` (as ``python path/jobs.py`` would have it), so that it imports its siblings. A
dotted name is imported from the working directory.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path


class RequireError(ImportError):
    """A module named by ``-r`` could not be loaded. The message is one line: which module,
    what went wrong, and where; the original exception is the cause."""


def load_module(name: str) -> None:
    """Import ``name`` (a dotted module from the working directory, or a path to a .py file)."""
    try:
        if name.endswith(".py") or os.sep in name:
            _load_file(name)
        else:
            _add_to_path(os.getcwd())
            importlib.import_module(name)
    except RequireError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(f"{exc.name}.")):
            raise RequireError(
                f"-r {name}: no module {exc.name!r} in {Path.cwd()} or on sys.path "
                "(give a dotted module importable from the working directory, or a path to a .py file)"
            ) from exc
        raise RequireError(f"-r {name}: importing it failed: {_described(exc)}") from exc
    except SyntaxError as exc:
        where = f"{_shown(Path(exc.filename))} line {exc.lineno}" if exc.filename else "unknown place"
        raise RequireError(f"-r {name}: syntax error at {where}: {exc.msg}") from exc
    except Exception as exc:
        raise RequireError(f"-r {name}: importing it failed: {_described(exc)}") from exc


def _load_file(name: str) -> None:
    path = Path(name).resolve()
    if not path.is_file():
        raise RequireError(f"-r {name}: no such file ({path})")
    loaded = sys.modules.get(path.stem)
    # Running a file twice would register its jobs twice (the API's workers load what the
    # command line already loaded).
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise RequireError(f"-r {name}: cannot load this file as a Python module")
    _add_to_path(str(path.parent))
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        # A module that failed halfway must not look loaded to the next attempt.
        sys.modules.pop(path.stem, None)
        raise


def _add_to_path(directory: str) -> None:
    if directory not in sys.path:
        sys.path.insert(0, directory)


def _described(exc: BaseException) -> str:
    """``Type: message (file line N)``, at the innermost frame outside the import machinery."""
    stack = traceback.extract_tb(exc.__traceback__)
    frames = [frame for frame in stack if not frame.filename.startswith("<frozen ")]
    where = f" ({_shown(Path(frames[-1].filename))} line {frames[-1].lineno})" if frames else ""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}{where}" if message else f"{type(exc).__name__}{where}"


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
