"""``error_class`` names what a user can import: AsyncTask's own exceptions by their public path."""

from __future__ import annotations

import pytest

import asynctask
from asynctask.demo.jobs import SupplierTimeout
from asynctask.errors import error_class_name


class Declined(Exception):
    """An application's own exception."""


@pytest.mark.parametrize(
    ("exc", "name"),
    [
        (asynctask.JobFailed("no"), "asynctask.JobFailed"),
        (asynctask.JobNotRegistered("Nope"), "asynctask.JobNotRegistered"),
        (asynctask.TaskNotFound("t1"), "asynctask.TaskNotFound"),
        (asynctask.PayloadError("bad"), "asynctask.PayloadError"),
        (ValueError("x"), "ValueError"),
        (Declined(), f"{__name__}.Declined"),
        # Defined inside the package but not exported by it: its module is where it lives.
        (SupplierTimeout(), "asynctask.demo.jobs.SupplierTimeout"),
    ],
)
def test_error_class_name(exc: BaseException, name: str) -> None:
    assert error_class_name(exc) == name
