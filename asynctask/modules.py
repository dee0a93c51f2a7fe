"""Loading the modules that register jobs (``-r`` / ``ASYNCTASK_REQUIRE``), named by the operator.

Only the operator names modules; a payload never does (see ``asynctask.registry``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path


def load_module(name: str) -> None:
    """Import ``name`` (a dotted module from the working directory, or a path to a .py file)."""
    if name.endswith(".py") or os.sep in name:
        path = Path(name).resolve()
        if not path.is_file():
            raise ImportError(f"-r {name}: no such file")
        loaded = sys.modules.get(path.stem)
        # Running a file twice would register its jobs twice (the API's workers load what the
        # command line already loaded).
        if loaded is not None and getattr(loaded, "__file__", None) == str(path):
            return
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"-r {name}: cannot load this file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    importlib.import_module(name)
