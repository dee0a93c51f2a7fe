"""Periodic jobs: cron schedules that every worker runs, each tick enqueued once."""

from asynctask.periodic.schedule import CatchUp, Schedule, Schedules, default_schedules, periodic

__all__ = ["CatchUp", "Schedule", "Schedules", "default_schedules", "periodic"]
