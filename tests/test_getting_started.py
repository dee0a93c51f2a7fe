"""The getting-started guide's HTTP walk-through works as written: its shell blocks, run in order by
bash in a fresh directory holding a copy of ``examples/`` (a fresh SQLite file, no ASYNCTASK_*
variable), create a token, start the API and a worker, submit the products CSV and follow the task
to its end, which the test then checks with the same API. Only the port differs (a free one, not
8000, which another program may hold)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.processes import free_port

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guide" / "getting-started.md"
SECTION = "## Over HTTP, followed on a page"
#: What the test adds after the guide's commands: wait for the task's end, read it, its failed
#: items (as the guide does, now that all are in) and the page.
CHECKS = """
for attempt in $(seq 1 300); do
  curl -s -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8000/api/tasks/$TASK > final.json
  if grep -q '"status":"finished_with_errors"' final.json; then break; fi
  sleep 0.1
done
curl -s -H "Authorization: Bearer $TOKEN" \
  "http://127.0.0.1:8000/api/tasks/$TASK/items?status=failed" > failed.json
curl -s -o page.html -w '%{http_code}' http://127.0.0.1:8000/ > page.status
"""


def section_commands() -> str:
    text = GUIDE.read_text()
    assert SECTION in text
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, re.S | re.M)
    assert len(blocks) >= 4, blocks
    return "\n".join(blocks)


def test_the_http_walk_through_runs_as_written(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    port = str(free_port())
    script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\n"
    script += (section_commands() + CHECKS).replace("8000", port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTASK_") and k != "REDIS_URL"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    logs = "".join(f"\n--- {p.name}\n{p.read_text()}" for p in sorted(tmp_path.glob("*.log")))
    assert result.returncode == 0, result.stdout + result.stderr + logs

    created = json.loads((tmp_path / "task.json").read_text())
    assert (created["items"], created["jobs"], created["status"]) == (1000, 100, "pending")
    assert created["warnings"] == [
        {
            "code": "no_worker",
            "message": "no live worker listens to queue 'imports'; the jobs wait until one does",
        }
    ]
    final = json.loads((tmp_path / "final.json").read_text())
    assert final["id"] == created["task_id"]
    assert final["status"] == "finished_with_errors", final
    assert (final["counts"]["finish"], final["counts"]["failed"]) == (100, 0)
    assert final["items"] == {"total": 1000, "done": 990, "failed": 10}
    failed = json.loads((tmp_path / "failed.json").read_text())["items"]
    assert len(failed) == 10
    assert failed[0]["message"] == "SKU SKU-00097: price must be positive, got -1.00"
    assert failed[0]["item"]["sku"] == "SKU-00097"
    assert (tmp_path / "page.status").read_text() == "200"
    assert "<html" in (tmp_path / "page.html").read_text().lower()
