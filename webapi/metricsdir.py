"""The directory through which ``asynctask api``'s worker processes share their request metrics
(prometheus_client's multiprocess mode), so that a scrape answered by any one worker reports
the requests of all of them.

prometheus_client chooses its mode once, when it is first imported, from
``PROMETHEUS_MULTIPROC_DIR``. This module does not import it, and neither does the package on
import (``webapi.create_app`` is loaded on first use), so that the command can name the
directory before anything does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

#: prometheus_client's switch: set, every process that imports it writes its metrics to files
#: in that directory.
ENV = "PROMETHEUS_MULTIPROC_DIR"


@contextmanager
def shared_metrics_dir() -> Iterator[str]:
    """A new private directory named by ``PROMETHEUS_MULTIPROC_DIR`` while the block runs,
    removed after. It must start empty: files left by an earlier server would be added to
    this one's totals."""
    path = tempfile.mkdtemp(prefix="asynctask-api-metrics-")
    owner = os.getpid()
    previous = os.environ.get(ENV)
    os.environ[ENV] = path
    try:
        yield path
    finally:
        # gunicorn's workers are forks of this process that exit by raising SystemExit through
        # this block: only the server that made the directory removes it.
        if os.getpid() == owner:
            shutil.rmtree(path, ignore_errors=True)
            if previous is None:
                del os.environ[ENV]
            else:
                os.environ[ENV] = previous
