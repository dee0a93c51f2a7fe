"""The HTTP API's example job: import products from the rows of a sheet.

``asynctask api -r examples/products.py`` offers it to the API and the example page;
``asynctask worker -r examples/products.py -q imports`` runs it: its jobs go to the queue
``imports``, which a worker takes only when ``-q`` names it.
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


def import_product(row: dict[str, str]) -> None:
    """Import one product; a price of zero or less fails this row alone."""
    try:
        price = Decimal(row["price"])
    except InvalidOperation:
        raise asynctask.JobFailed(f"SKU {row['sku']}: {row['price']!r} is not a price") from None
    if price <= 0:
        raise asynctask.JobFailed(f"SKU {row['sku']}: price must be positive, got {price}")
    time.sleep(0.005)  # stands in for the real work, so that progress is visible


@asynctask.job(api=True, item_schema=ROW_SCHEMA, queue="imports")
def import_products(rows: list[dict[str, str]]) -> None:
    """Import products (sku, name, price); a price of zero or less is refused."""
    # Row by row: a refused row is a failed item with its message, and the chunk goes on.
    asynctask.each(rows, import_product)
