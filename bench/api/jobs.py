"""The job of the api section: submittable through the HTTP API, with an item schema.

The API server loads this module (``ASYNCTASK_REQUIRE=bench.api.jobs``); no worker ever runs
the job: its queue (``QUEUE``) is never consumed, and the bench empties the private Redis
between runs. The schema is the shape of the API's example import (CSV rows, all strings),
so that every POST pays for validation as a real submission would.
"""

from __future__ import annotations

from typing import Any

from asynctask import job

#: Registered name: the ``job`` of every POST.
NAME = "BenchImport"
#: A queue no worker reads.
QUEUE = "bench_api"

ITEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["sku", "name", "price"],
    "properties": {
        "sku": {"type": "string", "minLength": 1},
        "name": {"type": "string"},
        "price": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?$"},
    },
}


@job(name=NAME, queue=QUEUE, api=True, item_schema=ITEM_SCHEMA)
def bench_import(rows: list[dict[str, str]]) -> None:
    """Import a chunk of product rows (never run by the bench)."""


def item(i: int) -> dict[str, str]:
    """Item ``i`` of a POST: one CSV row's worth of strings (about 60 bytes of JSON)."""
    return {"sku": f"SKU-{i:07d}", "name": f"Product {i}", "price": f"{i % 9999 + 1}.{i % 100:02d}"}
