"""The tracking section: what task tracking costs a worker, ``create_task`` and ``get_task``."""
