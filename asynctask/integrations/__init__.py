"""Tracking attached to other runtimes: one module per runtime, each an optional extra
(``pip install 'asynctask-jobs[celery]'``, ``[rq]``, ``[dramatiq]``). Nothing else in
asynctask imports them."""
