"""The HTTP API's example job: import products from the rows of a sheet.

``asynctask api -r examples/products.py`` offers it to the API and the example page;
``asynctask worker -r examples/products.py`` runs it.
"""

from __future__ import annotations

import time
from decimal import Decimal, InvalidOperation

import asynctask

ROW_SCHEMA = {
    "type": "object",
    "required": ["sku", "name", "price"],
    "properties": {
        "sku": {"type": "string", "minLength": 1, "maxLength": 40},
        "name": {"type": "string", "maxLength": 200},
        "price": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]{1,2})?$"},
    },
}


@asynctask.job(api=True, item_schema=ROW_SCHEMA, queue="default")
def import_products(rows: list[dict[str, str]]) -> None:
    """Import products (sku, name, price); a price of zero or less is refused."""
    job = asynctask.current_job()
    for done, row in enumerate(rows, start=1):
        try:
            price = Decimal(row["price"])
        except InvalidOperation:
            raise asynctask.JobFailed(f"SKU {row['sku']}: {row['price']!r} is not a price") from None
        if price <= 0:
            raise asynctask.JobFailed(f"SKU {row['sku']}: price must be positive, got {price}")
        time.sleep(0.005)  # stands in for the real work, so that progress is visible
        job.progress(done, len(rows))
