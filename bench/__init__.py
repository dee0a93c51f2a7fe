"""Side-by-side benchmark of AsyncTask and Ruby Sidekiq 6.4 on a private Redis, and of task
tracking (tracking on vs off, create_task, get_task; ``bench/tracking_bench.py``).

Run it from the repository root: ``python -m bench`` (full) or ``python -m bench --quick``
(smoke). See ``bench/__main__.py`` for the options and ``bench/results/RESULTS.md`` for the
last full run.
"""
