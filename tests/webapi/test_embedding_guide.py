"""The embedding guide's Flask app works as written: its first code block, saved as ``app.py`` next
to a ``myjobs`` module with one job, runs in a fresh process on a fresh SQLite file (the settings
from the environment, as the guide says) and mounts the API and the page under its prefix behind
the app's own session login. A process of its own: the guide's jobs join the default registry."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from asynctask.db.migrate import upgrade

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "embedding.md"

MYJOBS = '''
import asynctask


@asynctask.job(api=True)
def echo(items: list) -> None:
    """Do nothing with any items."""
'''

#: Drives the guide's app with Flask's test client, as a browser of the app would, and prints
#: what it saw as JSON.
VISIT = """
import json

from app import app

http = app.test_client()
seen = {"anonymous": http.get("/jobs/api/tasks").status_code}
seen["login"] = http.get("/login").status_code
created = http.post("/jobs/api/tasks", json={"job": "echo", "items": [1, 2, 3]})
seen["created"] = created.status_code
task_id = created.get_json()["task_id"]
seen["listed"] = [task["id"] == task_id for task in http.get("/jobs/api/tasks").get_json()["items"]]
seen["page"] = http.get("/jobs/").status_code
seen["script"] = http.get("/jobs/static/app.js").status_code
seen["outside"] = http.get("/api/tasks").status_code
print(json.dumps(seen))
"""


def test_the_guides_app_mounts_the_api_and_the_page_behind_its_own_login(tmp_path: Path) -> None:
    (block, *_) = re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), re.S | re.M)
    (tmp_path / "app.py").write_text(block)
    (tmp_path / "myjobs.py").write_text(MYJOBS)
    database = f"sqlite:///{tmp_path / 'jobs.db'}"
    upgrade(database)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTASK_") and k != "REDIS_URL"}
    env.update(ASYNCTASK_DATABASE_URL=database, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    result = subprocess.run(
        [sys.executable, "-c", VISIT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "anonymous": 401,
        "login": 200,
        "created": 202,
        "listed": [True],
        "page": 200,
        "script": 200,
        "outside": 404,
    }
