"""Jobs submittable through the HTTP API, loaded with ``-r`` by the worker and the API server
of the browser test (tests/webapi/test_browser.py)."""

from __future__ import annotations

import time
from decimal import Decimal

from asynctask import JobFailed, each, job

#: One CSV row. CSV values are strings, so the price is checked as text here and as a number
#: by the job: a negative price passes validation but fails the job (a business failure).
PRODUCT_SCHEMA = {
    "type": "object",
    "required": ["sku", "name", "price"],
    "properties": {
        "sku": {"type": "string", "minLength": 1},
        "name": {"type": "string"},
        "price": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?$"},
    },
}


@job(api=True, item_schema=PRODUCT_SCHEMA)
def import_products(rows: list[dict[str, str]]) -> None:
    """Import a chunk of product rows (sku, name, price); a price must be positive."""
    time.sleep(0.02)  # slow enough for the progress bar to move
    for row in rows:
        if row["name"] == "binary":
            # A field read from bytes, as job code may by accident: a lone surrogate and a NUL.
            field = b"\xff\x00".decode("utf-8", "surrogateescape")
            raise JobFailed(f"unreadable field {field} in SKU {row['sku']}")
        if Decimal(row["price"]) <= 0:
            raise JobFailed(f"price must be positive for SKU {row['sku']}")


def _sign_up(row: dict[str, str]) -> None:
    if Decimal(row["price"]) <= 0:
        raise JobFailed(f"price must be positive for SKU {row['sku']}")


@job(api=True, item_schema=PRODUCT_SCHEMA)
def sign_up_products(rows: list[dict[str, str]]) -> None:
    """Sign up a chunk of product rows one by one: a row with a bad price fails alone."""
    each(rows, _sign_up)
