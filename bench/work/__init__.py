"""``python -m bench.work REF``: the work each job costs, this tree against git REF, counted rather
than timed.

The drains of ``--ab`` and ``bench.compare`` time what they measure, and on a small shared machine
two runs of one build differ by more than a few percent. What a change does to the cost of a job
can also be counted, and counts drift far less with the machine's load: the Python function calls
the worker process makes, the Redis commands the server runs (Lua's included), and the rows
PostgreSQL reads and writes. Each tree drains the same scenarios (``scenarios.py``, public API
only) at two sizes; the difference between the sizes, per job, leaves out what a worker costs
once (imports, start-up, shutdown). Each drain runs three times: how many jobs a claim brings
follows the timing of the jobs and the round trips, so counts that go with claims vary from one
drain to the next, and a change is told from that by the ranges.
"""
