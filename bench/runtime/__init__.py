"""The runtime section: no-op drain throughput of AsyncTask, Ruby Sidekiq and the Python peers on Redis."""
