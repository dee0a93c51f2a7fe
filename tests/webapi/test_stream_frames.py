"""What a progress stream sends: small snapshots, whose errors are brief, as many as ``?errors=``
asks, and sent only when they change (and in the first and the last snapshot)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import select, update

from asynctask.tracking.models import Event, Task
from tests.webapi.conftest import Api
from tests.webapi.test_api import error_of, read_events

#: The most one SSE frame of a task with 10 errors may weigh, with the default ``errors``.
FRAME_LIMIT = 3 * 1024


def raw_frames(response: Any) -> list[str]:
    text = "".join(chunk.decode() for chunk in response.response)
    return [block for block in text.split("\n\n") if block.startswith("event: ")]


def test_a_frame_of_a_task_with_10_errors_is_under_3_kb(make_api: Any, start_tracked_worker: Any) -> None:
    api: Api = make_api(max_items=100, max_body_bytes=64 * 1024)
    # 30 jobs of 3 rows, every third job with one negative price: 10 failed jobs.
    rows = [
        {"sku": f"SKU-{i:04d}", "name": f'Widget "{i}", blue', "price": "-1.00" if i % 9 == 4 else "9.99"}
        for i in range(90)
    ]
    created = api.post_json({"job": "import_products", "items": rows, "chunk_size": 3}).get_json()
    stream = api.http.get(f"/api/tasks/{created['task_id']}/stream", headers=api.headers(), buffered=False)
    start_tracked_worker()
    frames = raw_frames(stream)

    assert frames[-1].startswith("event: end\n")
    end = json.loads(frames[-1].split("data: ", 1)[1])
    assert end["counts"]["failed"] == 10 and len(end["errors"]) == 10
    sizes = [len(frame.encode()) + 2 for frame in frames]
    assert max(sizes) < FRAME_LIMIT, sizes
    # Brief: the message, the public class name and the chunk's size, not the chunk.
    first = end["errors"][0]
    assert first["error"] == "price must be positive for SKU SKU-0004"
    assert (first["error_class"], first["items"], first["status"]) == ("asynctask.JobFailed", 3, "failed")
    assert "params" not in first and "messages" not in first
    # The same task's full snapshot, with the jobs' parameters and logs, is several times larger.
    full = api.get(f"/api/tasks/{created['task_id']}").get_data()
    assert len(full) > 2 * FRAME_LIMIT


def next_event(chunks: Iterator[bytes]) -> tuple[str, dict[str, Any]]:
    """The stream's next event (keepalives and the retry line skipped)."""
    for chunk in chunks:
        block = chunk.decode()
        if block.startswith("event: "):
            kind, data = block.strip().split("\n", 1)
            return kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))
    raise AssertionError("the stream ended")


def test_errors_parameter_and_errors_sent_only_when_they_change(api: Api) -> None:
    """No worker: the events are moved by hand, so every step is known. Two streams of one task
    ask for 2 and 5 errors."""
    task_id = api.post_json({"job": "echo", "items": list(range(8))}).get_json()["task_id"]
    with api.engine.connect() as connection:
        query = select(Event.id).where(Event.task_id == task_id).order_by(Event.id)
        ids: list[int] = list(connection.execute(query).scalars())

    def move(connection: Any, event_ids: list[int], status: str) -> None:
        connection.execute(
            update(Event)
            .where(Event.id.in_(event_ids))
            .values(status=status, error=f"{status} job", error_class="asynctask.JobFailed")
        )

    with api.engine.begin() as connection:
        move(connection, ids[:6], "failed")
        connection.execute(update(Task).where(Task.id == task_id).values(count_failed=6, count_enqueue=2))

    two = iter(
        api.http.get(f"/api/tasks/{task_id}/stream?errors=2", headers=api.headers(), buffered=False).response
    )
    five = iter(
        api.http.get(f"/api/tasks/{task_id}/stream?errors=5", headers=api.headers(), buffered=False).response
    )
    kind, snapshot = next_event(two)
    assert kind == "progress" and [e["id"] for e in snapshot["errors"]] == ids[:2]
    kind, snapshot = next_event(five)
    assert kind == "progress" and [e["id"] for e in snapshot["errors"]] == ids[:5]
    assert snapshot["errors"][0] == {
        "id": ids[0],
        "job_id": snapshot["errors"][0]["job_id"],
        "status": "failed",
        "attempt": 0,
        "error": "failed job",
        "error_class": "asynctask.JobFailed",
        "items": 1,
    }

    # One more job done, the first errors unchanged: the snapshots leave them out.
    with api.engine.begin() as connection:
        move(connection, ids[6:7], "finish")
        connection.execute(update(Task).where(Task.id == task_id).values(count_finish=1, count_enqueue=1))
    for chunks in (two, five):
        kind, snapshot = next_event(chunks)
        assert (kind, snapshot["counts"]["finish"]) == ("progress", 1)
        assert "errors" not in snapshot

    # The last job fails: the task is done, and "end" holds the errors again, as asked.
    with api.engine.begin() as connection:
        move(connection, ids[7:], "error")
        connection.execute(update(Task).where(Task.id == task_id).values(count_error=1, count_enqueue=0))
    for chunks, count in ((two, 2), (five, 5)):
        kind, snapshot = next_event(chunks)
        assert (kind, snapshot["status"]) == ("end", "finished_with_errors")
        assert [e["id"] for e in snapshot["errors"]] == ids[:count]

    # errors=0 leaves them out; the bound is the one of GET /api/tasks/<id>.
    response = api.get(f"/api/tasks/{task_id}/stream?errors=0")
    assert [snapshot["errors"] for _, snapshot in read_events(response)] == [[]]
    for bad in ("-1", "101", "x"):
        response = api.get(f"/api/tasks/{task_id}/stream?errors={bad}")
        assert (response.status_code, error_of(response)["details"]) == (422, {"field": "errors"})
