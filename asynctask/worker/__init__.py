"""The worker runtime: launcher -> manager -> processors, with the poller and the heartbeat."""

from asynctask.worker.launcher import Worker

__all__ = ["Worker"]
