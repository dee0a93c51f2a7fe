"""Benchmarks of AsyncTask: side by side with Ruby Sidekiq 6.4 and the Python peers on a private
Redis, and of task tracking, the HTTP API and the SQL broker (next to Huey and procrastinate).

One package per section (runtime, latency, memory, ceiling, tracking, api, sse, sql) and a
shared core (``bench/core``). Run it from the repository root: ``python -m bench`` (full) or
``python -m bench --quick`` (smoke). ``bench/README.md`` tells how, and holds the figures;
``bench/results/RESULTS.md`` is the last full run.
"""
