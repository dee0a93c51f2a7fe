"""Task tracking: Task and Event rows in SQL for every tracked job, written in batches.

Worker side: ``tracker`` and ``outbox`` (recording without round trips), ``store`` (what
tracking asks of a broker: each broker offers one), ``apply`` (transitions to SQL, called by
the brokers). Read side: ``queries``, ``views``, ``cache``. Tables: ``models``. The tracking
middleware is in ``asynctask.middleware``; creating, cancelling and retrying tasks, which push
through a Client, in ``asynctask.tasks``.
"""
