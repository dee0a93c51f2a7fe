"""Side-by-side benchmark of AsyncTask and Ruby Sidekiq 6.4 on a private Redis, of task
tracking (tracking on vs off, create_task, get_task; ``bench/tracking_bench.py``), of the HTTP
API (``bench/api_bench.py``), and of the SQL broker against Huey's SqliteHuey and
procrastinate (``bench/sql_bench.py``).

Run it from the repository root: ``python -m bench`` (full) or ``python -m bench --quick``
(smoke). See ``bench/__main__.py`` for the options and ``bench/results/RESULTS.md`` for the
last full run.
"""
