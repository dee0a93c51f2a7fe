"""The worker runtime: launcher -> manager -> processors, with the poller and the heartbeat.

``Worker`` is imported on first use: a module of this package runs on its own without the
whole runtime (``watchdog_process``, run as a file, imports no module of the package at all).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asynctask.worker.launcher import Worker
else:

    def __getattr__(name: str) -> Any:
        if name != "Worker":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from asynctask.worker.launcher import Worker

        globals()["Worker"] = Worker
        return Worker


__all__ = ["Worker"]
