"""Alembic revisions; a package so that setuptools ships them with ``asynctask._migrations``."""
