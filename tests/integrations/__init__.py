"""Tracking attached to Celery, RQ and Dramatiq workers."""
