"""Task feeds: a task's jobs held back and released at most ``parallel`` at a time, at most
once per ``interval``, at a ``priority``, all tunable while the task runs (see
docs/guide/feeds.md). The brokers hold and release the jobs (``brokers.feeds``).
"""

from asynctask.feeds.model import FEED_FIELD, Feed, FeedChange, FeedState, check_change

__all__ = ["FEED_FIELD", "Feed", "FeedChange", "FeedState", "check_change"]
