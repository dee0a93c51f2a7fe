"""Interoperability tests against the real Ruby Sidekiq 6.4 (marker ``interop``)."""
