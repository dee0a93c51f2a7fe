"""Every Redis key AsyncTask reads or writes, in one place, with the optional namespace.

Sidekiq's keys keep Sidekiq's names so that Ruby and Python processes share them. The few
keys that only AsyncTask uses (reliable fetch bookkeeping, flow control) start with
``asynctask:`` and are never read by Sidekiq.

The flow control keys of a job are built from its payload inside the Lua scripts too
(``brokers/redis/lua/``: ``lanes.lua``, ``unique.lua``, ``rates.lua``, ``feeds.lua``,
``fair_share.lua``), with the same names as the methods here.
"""

from __future__ import annotations

from datetime import UTC, datetime


class Keys:
    """Key names under a namespace prefix, as redis-namespace writes them (``myapp:queues``).

    Values stored *inside* keys (queue names in ``queues``, identities in ``processes``) are
    never prefixed, as with redis-namespace.
    """

    def __init__(self, namespace: str = "") -> None:
        self.namespace = namespace
        self.prefix = f"{namespace}:" if namespace else ""
        p = self.prefix
        self.queues = f"{p}queues"
        self.schedule = f"{p}schedule"
        self.retry = f"{p}retry"
        self.dead = f"{p}dead"
        self.processes = f"{p}processes"
        self.stat_processed = f"{p}stat:processed"
        self.stat_failed = f"{p}stat:failed"
        #: Hash: in-flight list key -> owner identity, for recovering the lists of dead processes.
        self.inflight_registry = f"{p}asynctask:inflight"
        #: Lock so that one process per interval scans for orphaned in-flight lists.
        self.recovery_lock = f"{p}asynctask:recovery-lock"
        #: Stream of tracked jobs' transitions, read by the flushers (consumer group ``flushers``).
        self.tracking_stream = f"{p}asynctask:tracking"
        #: Counter numbering transitions, so that SQL can tell newer from older.
        self.tracking_seq = f"{p}asynctask:tracking:seq"
        #: A token set once and never removed: a worker that finds another (or none) knows that
        #: Redis lost its data since it last looked (``brokers.redis.epoch``).
        self.data_epoch = f"{p}asynctask:epoch"
        #: How many times a worker found that Redis had lost its data.
        self.data_losses = f"{p}asynctask:stat:data-lost"
        #: Hash: cancelled task id -> when; ``cancel_generation`` changes on every cancel.
        self.cancelled_tasks = f"{p}asynctask:cancelled"
        self.cancel_generation = f"{p}asynctask:cancelled:generation"
        #: Hash: concurrency key -> its limit, for the keys that have slot holders or a line.
        self.lanes = f"{p}asynctask:lanes"
        #: Set once any job took a concurrency slot, a unique key or a feed slot under this namespace:
        #: until then a read API clear unlinks a queue or set without looking at its jobs.
        self.flow_used = f"{p}asynctask:flow-used"
        #: Sorted set: fed task id -> when a tick is to release its feed.
        self.feeds = f"{p}asynctask:feeds"
        #: Set: names of the queues served in push order (no shares); pushes read it, worker
        #: starts write it (see docs/internals/fair-share-redis.md).
        self.fifo = f"{p}asynctask:fifo"
        #: Sorted set: stopped jobs (payload with the cursor they stopped at), scored by when
        #: they stopped; a sixth job set beside Sidekiq's, which Sidekiq never reads.
        self.stopped = f"{p}asynctask:stopped"
        #: Set: names of the paused queues, whose jobs no worker takes until they are resumed
        #: (pushes still land in them); the claim script reads it.
        self.paused = f"{p}asynctask:paused"

    def queue(self, name: str) -> str:
        return f"{self.prefix}queue:{name}"

    def queue_name(self, key: str) -> str:
        return key[len(self.prefix) + len("queue:") :]

    def process(self, identity: str) -> str:
        return f"{self.prefix}{identity}"

    def workers(self, identity: str) -> str:
        """Busy-thread hash read by Sidekiq <= 6.4.1."""
        return f"{self.prefix}{identity}:workers"

    def work(self, identity: str) -> str:
        """Busy-thread hash read by Sidekiq >= 6.4.2."""
        return f"{self.prefix}{identity}:work"

    def signals(self, identity: str) -> str:
        return f"{self.prefix}{identity}-signals"

    def staging(self, task_id: str, queue: str) -> str:
        """Private list of a task's jobs for ``queue`` while ``create_task`` writes them; no
        worker reads it until the publish script moves it onto the queue."""
        return f"{self.prefix}asynctask:staging:{task_id}:{queue}"

    def staging_flow(self, task_id: str) -> str:
        """Private list of a task's jobs with a concurrency or unique key: published one by
        one through their key's line and unique key rather than moved as a whole."""
        return f"{self.prefix}asynctask:staging-flow:{task_id}"

    def staging_feed(self, task_id: str) -> str:
        """Private list of a fed task's jobs, as held entries in item order: it becomes the
        feed's held list when published."""
        return f"{self.prefix}asynctask:staging-feed:{task_id}"

    def feed(self, task_id: str) -> str:
        """Hash: a fed task's feed (parallel, interval, priority, paused, last release)."""
        return f"{self.prefix}asynctask:feed:{task_id}"

    def feed_held(self, task_id: str) -> str:
        """List: a feed's held jobs, next first, each as a line entry (see ``lane``)."""
        return f"{self.prefix}asynctask:feed-held:{task_id}"

    def feed_out(self, task_id: str) -> str:
        """Hash: jid -> queue of a feed's released jobs that have not ended."""
        return f"{self.prefix}asynctask:feed-out:{task_id}"

    def lane(self, key: str) -> str:
        """List: the jobs of concurrency key ``key`` waiting for a slot, oldest first, each as
        ``<length>:<jid><length>:<queue><payload>`` (promoting one decodes nothing)."""
        return f"{self.prefix}asynctask:lane:{key}"

    def lane_holders(self, key: str) -> str:
        """Set: the jids holding a slot of concurrency key ``key``."""
        return f"{self.prefix}asynctask:holders:{key}"

    def rate(self, key: str) -> str:
        """Sorted set: the starts within the sliding window of rate key ``key`` (score: time)."""
        return f"{self.prefix}asynctask:rate:{key}"

    def rate_next(self, key: str) -> str:
        """When the next job postponed by rate key ``key`` is due (spreads out a backlog)."""
        return f"{self.prefix}asynctask:rate-next:{key}"

    def unique(self, key: str) -> str:
        """The jid holding unique key ``key``; expires after the job's ``unique_for``."""
        return f"{self.prefix}asynctask:unique:{key}"

    def share(self, queue: str, share: str) -> str:
        """List: the jobs of one share of a fair queue, waiting as in ``queue:<queue>`` (LPUSH
        at the tail, taken from the right end)."""
        return f"{self.prefix}asynctask:share|{queue}|{share}"

    def shares(self, queue: str) -> str:
        """List: the ring of a fair queue's shares with jobs waiting, plus ``""`` for
        ``queue:<queue>`` itself; it exists only while a share, or the urgent list, holds jobs."""
        return f"{self.prefix}asynctask:shares|{queue}"

    def urgent(self, queue: str) -> str:
        """List: jobs of a fair queue served ahead of every share (a fed task released at a
        negative priority)."""
        return f"{self.prefix}asynctask:urgent|{queue}"

    def bell(self, queue: str) -> str:
        """List: tokens pushed with every job that lands outside ``queue:<queue>``, for the
        idle threads that block on it (BLMOVE on the queue would not see those jobs)."""
        return f"{self.prefix}asynctask:bell|{queue}"

    def inflight(self, identity: str, queue: str) -> str:
        """Private list holding the jobs this process fetched from ``queue`` and has not finished."""
        return f"{self.prefix}asynctask:inflight|{identity}|{queue}"

    def periodic(self, field: str) -> str:
        """One field of every periodic schedule (see ``brokers.redis.periodic``)."""
        return f"{self.prefix}asynctask:periodic:{field}"

    def checkpoint(self, jid: str) -> str:
        """Hash: a resumable job's checkpoint (``c`` cursor, ``n`` iterations) and ``stop`` flag."""
        return f"{self.prefix}asynctask:checkpoint:{jid}"

    def callback_pushed(self, jid: str) -> str:
        """String: set by the script that pushes a task's callback job, so that it pushes once."""
        return f"{self.prefix}asynctask:callback-pushed:{jid}"

    def added_pushed(self, jid: str) -> str:
        """String: set by the script that pushes the jobs a running job added to its task (named
        for the first of them), so that they are pushed once."""
        return f"{self.prefix}asynctask:added-pushed:{jid}"

    def stat_processed_day(self, when: datetime | None = None) -> str:
        return f"{self.stat_processed}:{_day(when)}"

    def stat_failed_day(self, when: datetime | None = None) -> str:
        return f"{self.stat_failed}:{_day(when)}"


def _day(when: datetime | None) -> str:
    return (when or datetime.now(UTC)).strftime("%Y-%m-%d")
