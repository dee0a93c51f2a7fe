"""The SQL plumbing shared by task tracking and the SQL broker: engines (``engine``), the
declarative base whose metadata holds every table (``base``) and the Alembic migrations of
that metadata (``migrate``). It knows nothing of either user's tables."""
