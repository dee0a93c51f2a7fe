"""Alembic migrations of the tracking tables, installed as ``asynctask._migrations``.

A regular package (not a namespace one) so that ``importlib.resources`` hands back its directory
on disk, which is what Alembic reads.
"""
