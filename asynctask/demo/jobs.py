"""The demo's job: import product rows, a chunk at a time, meeting what real imports meet.

Three kinds of trouble are planted in the sample rows, at fixed positions so that the outcome
is known in advance (see ``sample_rows``):

- a negative price: a business failure (``asynctask.JobFailed``), shown to the user, never
  retried; the chunk's event ends ``failed``;
- the supplier ``slowco``, whose stock service times out on a job's first try: a transient
  error, retried after about a second (``retry_in``), after which the chunk ends ``finish``;
- the category ``kitchen``, which the tax table lacks: a crash (a bug of the importer), not
  retried because retrying runs the same code on the same row; the chunk ends ``error``.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any, Literal

import asynctask
from asynctask.payload import JobDict

#: Rows per job when the demo submits its task.
CHUNK_SIZE = 10
#: Seconds of pretend work per row, so that the progress can be watched.
ROW_SECONDS = 0.01
#: Every row index ``i`` with ``i % 100 == 42`` has a negative price.
FAILED_EVERY, FAILED_AT = 100, 42
#: Every row index ``i`` with ``i % 100 == 77`` comes from the supplier that times out once.
FLAKY_EVERY, FLAKY_AT = 100, 77
#: Every row index ``i`` with ``i % 300 == 155`` has a category missing from the tax table.
BROKEN_EVERY, BROKEN_AT = 300, 155
FLAKY_SUPPLIER = "slowco"

TAX_RATES = {"books": Decimal("0.055"), "garden": Decimal("0.20"), "toys": Decimal("0.20")}

ROW_SCHEMA = {
    "type": "object",
    "required": ["sku", "name", "price", "category", "supplier"],
    "properties": {
        "sku": {"type": "string", "minLength": 1, "maxLength": 40},
        "name": {"type": "string", "maxLength": 200},
        "price": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]{1,2})?$"},
        "category": {"type": "string", "minLength": 1},
        "supplier": {"type": "string", "minLength": 1},
    },
}


class SupplierTimeout(ConnectionError):
    """The supplier's stock service did not answer in time: worth another try."""


@asynctask.job(api=True, item_schema=ROW_SCHEMA, retry=3)
def demo_import_products(rows: list[dict[str, str]]) -> None:
    """Import product rows (the demo's sample job: some rows fail, some need a retry)."""
    job = asynctask.current_job()
    for done, row in enumerate(rows, start=1):
        sku = row["sku"]
        if row["supplier"] == FLAKY_SUPPLIER and job.retry_count is None:
            raise SupplierTimeout(f"SKU {sku}: supplier {FLAKY_SUPPLIER} did not answer within 2 s")
        price = Decimal(row["price"])
        if price <= 0:
            raise asynctask.JobFailed(f"SKU {sku}: price must be positive, got {price}")
        rate = TAX_RATES.get(row["category"])
        if rate is None:
            raise LookupError(f"SKU {sku}: no tax rate for category {row['category']!r}")
        time.sleep(ROW_SECONDS)
        job.progress(done, len(rows))


@demo_import_products.retry_in
def _retry_delay(count: int, exc: BaseException, job: JobDict) -> float | Literal["kill"]:
    # Sidekiq's default waits 15 s and more; a timeout is worth trying again at once (the
    # runtime adds Sidekiq's jitter of up to 9 s). Anything else is a bug: straight to the dead set.
    return 1.0 if isinstance(exc, SupplierTimeout) else "kill"


def sample_rows(count: int) -> list[dict[str, Any]]:
    """``count`` product rows; the planted troubles sit at the indexes the module names."""
    rows = []
    for index in range(count):
        price = Decimal(index % 97 * 100 + 199) / 100
        if index % FAILED_EVERY == FAILED_AT:
            price = -price
        category = "kitchen" if index % BROKEN_EVERY == BROKEN_AT else ("books", "garden", "toys")[index % 3]
        supplier = FLAKY_SUPPLIER if index % FLAKY_EVERY == FLAKY_AT else ("acme", "globex")[index % 2]
        rows.append(
            {
                "sku": f"DEMO-{index:06d}",
                "name": f"Demo product {index}",
                "price": str(price),
                "category": category,
                "supplier": supplier,
            }
        )
    return rows
