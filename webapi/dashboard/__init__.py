"""The operators' dashboard at ``/dashboard``: server-rendered pages over the read API
(``asynctask.api``) and the task tracking, on every broker.

Each page is one module; ``access`` guards them all (login, operator check, CSRF). The pages
need no build step and load nothing from another origin: a small script of their own refreshes
the live ones, and every value from a job reaches the page through Jinja's escaping.
"""

from webapi.dashboard import overview, periodic, processes, queues, set_aside, sets, tasks
from webapi.dashboard.blueprint import dashboard

__all__ = ["dashboard", "overview", "periodic", "processes", "queues", "set_aside", "sets", "tasks"]
