"""Importing this module is what an attacker would want: the hostile-input test proves it never happens."""

import os
from pathlib import Path

Path(os.environ.get("ASYNCTASK_EVIL_MARKER", "/tmp/asynctask-evil-imported")).write_text("imported")
