"""Tests of the HTTP API (webapi)."""
