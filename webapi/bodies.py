"""The API's JSON bodies as typed models: the serializers are annotated to build them (so mypy
ties the code to them), and ``/openapi.json`` describes them from here (``webapi.typeschema``).
A model's docstring and its fields' ``Keywords`` are the document's descriptions: they are
written for the API's readers."""

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from asynctask.tasks.options import TaskOptions
from asynctask.tracking.status import UNDONE, EventStatus, TaskStatus
from webapi.typeschema import Keywords

#: The events cursor: the id of the last event of the previous page (digits; 18 at most keep it
#: within a 64-bit integer, what the column holds).
EVENT_CURSOR = "^[0-9]{1,18}$"
#: The failed items cursor: the last item's event id and its place in its chunk.
ITEM_CURSOR = "^[0-9]{1,18}-[0-9]{1,9}$"
#: The tasks cursor: opaque (``<created_at>|<id>`` of the last task of the page, base64url).
TASK_CURSOR = "^[A-Za-z0-9_-]+$"
#: Characters of an error message a stream's error summary keeps (the events have it whole).
SUMMARY_ERROR_CHARS = 200
#: The most keys ``GET /api/keys`` lists, and the holders it lists per key (``holding`` counts
#: them all: a key's limit may be large).
MAX_KEYS = 1000
MAX_HOLDERS = 100

DateTime = Annotated[str, Keywords(format="date-time")]
Count = Annotated[int, Keywords(minimum=0)]
UriReference = Annotated[str, Keywords(format="uri-reference")]
TaskStatusName = Annotated[str, Keywords(enum=[status.value for status in TaskStatus])]
EventStatusName = Annotated[str, Keywords(enum=[status.value for status in EventStatus])]


def _option(name: str) -> Keywords:
    """A feed setting's keywords as ``TaskOptions`` states them for a request."""
    schema = TaskOptions.request_schema()[name]
    del schema["type"]
    return Keywords(**schema)


# --- errors ---------------------------------------------------------------------------------------


class ErrorFields(TypedDict):
    code: Annotated[str, Keywords(description="Stable; clients branch on it.")]
    message: Annotated[str, Keywords(description="For people; may change.")]
    details: Annotated[Any, Keywords(description="More about the error (JSON), or null.")]


class Error(TypedDict):
    """The body of every 4xx and 5xx response."""

    error: ErrorFields


# --- tasks ----------------------------------------------------------------------------------------


class Urls(TypedDict):
    """Where to read the task."""

    self: Annotated[UriReference, Keywords(description="`/api/tasks/{id}`")]
    events: Annotated[UriReference, Keywords(description="`/api/tasks/{id}/events`")]
    items: Annotated[UriReference, Keywords(description="`/api/tasks/{id}/items?status=failed`")]
    stream: Annotated[UriReference, Keywords(description="`/api/tasks/{id}/stream`")]


class TaskCounts(TypedDict):
    """Jobs of the task per event status (`stopped`: resumable jobs stopped by `stop_job`, kept
    with their checkpoint until resumed)."""

    enqueue: Count
    working: Count
    finish: Count
    failed: Count
    error: Count
    cancelled: Count
    stopped: Count
    lost: Count


class Message(TypedDict):
    """One line of a job's message log."""

    at: Annotated[DateTime, Keywords(description="When it was written.")]
    status: Annotated[str, Keywords(description="The job's status then.")]
    text: str


class JobProgress(TypedDict):
    """What the job last reported of its own progress."""

    done: int | None
    total: int | None


class ItemsRun(TypedDict):
    """Items of the job's chunk it ran one by one (`asynctask.each`) that ended well and that
    failed, over every run; null for a job that did not."""

    done: Count
    failed: Count


class Event(TypedDict):
    """One job of a task (its tracking event)."""

    id: Annotated[int, Keywords(minimum=1, description="Also the cursor (`after`) of the events list.")]
    job_id: str
    status: EventStatusName
    params: Annotated[
        list[Any] | None, Keywords(description="The job's arguments (here: one chunk of items).")
    ]
    attempt: Count
    error: Annotated[str | None, Keywords(description="The error message of a failed or error job.")]
    error_class: str | None
    progress: JobProgress | None
    items_run: ItemsRun | None
    enqueued_at: Annotated[DateTime | None, Keywords(description="When the job was last enqueued.")]
    started_at: Annotated[DateTime | None, Keywords(description="When the job last started.")]
    finished_at: Annotated[DateTime | None, Keywords(description="When the job last ended.")]
    updated_at: Annotated[DateTime | None, Keywords(description="The event's last change.")]
    messages: Annotated[
        list[Message],
        Keywords(
            description="The message log, oldest first: its latest 50 messages at most, each text cut "
            "(with `... (truncated, N bytes)`) when the answer's texts would pass its budget."
        ),
    ]
    earlier_messages: Annotated[
        Count, Keywords(description="Older messages of the log left out of `messages`.")
    ]


class ErrorSummary(TypedDict):
    """A failed or error job in brief (a progress stream's errors): no parameters, no log."""

    id: Annotated[
        int,
        Keywords(minimum=1, description="The event's id: `/events?after=<id - 1>&limit=1` returns it whole."),
    ]
    job_id: str
    status: Annotated[str, Keywords(enum=[status.value for status in UNDONE])]
    attempt: Count
    error: Annotated[
        str | None,
        Keywords(description=f"The error message, cut at {SUMMARY_ERROR_CHARS} characters (ending in …)."),
    ]
    error_class: str | None
    items: Annotated[Count | None, Keywords(description="Items in the job's chunk (its first argument).")]


class Feed(TypedDict):
    """A fed task's feed: at most `parallel` of its jobs are queued or running at once."""

    parallel: Annotated[int, _option("parallel")]
    interval: Annotated[float, _option("interval")]
    priority: Annotated[int, _option("priority")]
    paused: Annotated[bool, Keywords(description="No job is released until the task is resumed.")]
    held: Annotated[
        Count | None,
        Keywords(
            description="Jobs not released yet, as the broker counts them; 0 once the task has ended; "
            "null in task lists (the broker is not asked) or when the broker did not answer."
        ),
    ]


class TaskItems(TypedDict):
    """The task's items (a task whose jobs run them one by one counts each)."""

    total: Annotated[Count, Keywords(description="Items in all the task's chunks.")]
    done: Annotated[Count, Keywords(description="Items run one by one that ended well.")]
    failed: Annotated[
        Count, Keywords(description="Items run one by one that failed (`/items?status=failed` lists them).")
    ]


class TaskFields(TypedDict):
    """A task without its errors: what a task and its stream's snapshots share."""

    id: str
    job: Annotated[str, Keywords(description="The job's name.")]
    queue: str
    runtime: Annotated[
        str,
        Keywords(
            enum=["asynctask", "celery", "rq", "dramatiq"],
            description="What runs the task's jobs: AsyncTask's own workers, or another runtime with "
            "tracking attached (see the guide's Celery, RQ and Dramatiq page).",
        ),
    ]
    status: TaskStatusName
    total: Annotated[Count, Keywords(description="Jobs in the task.")]
    counts: TaskCounts
    done: Annotated[Count, Keywords(description="Jobs that will not run again.")]
    progress: Annotated[
        float,
        Keywords(
            minimum=0,
            maximum=1,
            description="Items run (done or failed) / `items.total` once any job ran its items one by "
            "one (`asynctask.each`), else `done` / `total`.",
        ),
    ]
    items: TaskItems
    eta_seconds: Annotated[
        float | None,
        Keywords(
            minimum=0,
            description="Seconds left at the rate the task's jobs have been ending at (since its first "
            "start, or since its feed last changed once `parallel` jobs have ended since); null before "
            "any job has ended, while the task is paused or only stopped jobs are left, and once it is "
            "not running.",
        ),
    ]
    ahead: Annotated[
        Count | None,
        Keywords(
            description="About how many jobs of its queue start before the task's next one (fair share: a "
            "round of the tenants waiting, and its tenant's earlier jobs); null when none of its jobs "
            "waits in the queue, in task lists and in streams."
        ),
    ]
    feed: Feed | None
    created_at: Annotated[DateTime, Keywords(description="When the task was created.")]
    started_at: Annotated[DateTime | None, Keywords(description="When its first job started.")]
    finished_at: Annotated[DateTime | None, Keywords(description="When its last job ended.")]
    cancelled_at: Annotated[DateTime | None, Keywords(description="When it was cancelled.")]
    meta: Annotated[dict[str, Any] | None, Keywords(description="The `meta` given at creation.")]
    urls: Urls


#: What holds the jobs of a task that waits for others.
HOLDS = ["waiting", "releasing", "released", "dropping", "dropped"]


class Callback(TypedDict):
    """A job the task pushes once when it ends (`on_complete`, `on_success`, `on_failure`)."""

    kind: Annotated[str, Keywords(enum=["complete", "success", "failure"])]
    job: str
    job_id: Annotated[str, Keywords(description="The callback job's jid, chosen when the task was created.")]
    state: Annotated[
        str,
        Keywords(
            enum=["waiting", "due", "pushed"],
            description="`waiting`: the task has not ended, or ended so that this kind does not apply; "
            "`due`: being pushed; `pushed`: in its queue (then it runs as any job does).",
        ),
    ]
    fired_at: Annotated[DateTime | None, Keywords(description="When the task's end made it due.")]


class Parent(TypedDict):
    """A task this one waits for (`after`)."""

    task_id: str
    job: str
    ended_at: Annotated[DateTime | None, Keywords(description="When this task saw it end; null: not yet.")]
    succeeded: Annotated[
        bool | None, Keywords(description="Whether it ended `finished`; null while it has not ended.")
    ]


class Child(TypedDict):
    """A task that waits for this one."""

    task_id: str
    job: str
    hold: Annotated[str, Keywords(enum=HOLDS, description="What holds its jobs.")]


class Task(TaskFields):
    """A task and its progress."""

    errors: Annotated[
        list[Event],
        Keywords(description="The first failed/error events (as many as `errors` asks; empty in lists)."),
    ]
    callbacks: Annotated[
        list[Callback],
        Keywords(description="Its callbacks, in the order given (empty in lists)."),
    ]
    run_if: Annotated[
        str | None,
        Keywords(
            enum=["success", "complete", None], description="For a task created with `after`; else null."
        ),
    ]
    hold: Annotated[
        str | None,
        Keywords(
            enum=[*HOLDS, None],
            description="What holds its jobs while it waits for its parents: `waiting`, then `released`, "
            "or `dropped` when it was cancelled (`releasing` and `dropping`: on their way); null for a task "
            "without parents.",
        ),
    ]
    cancel_reason: Annotated[
        str | None,
        Keywords(description="Why it was cancelled without anyone asking: the parent that did not succeed."),
    ]
    parents: Annotated[
        list[Parent], Keywords(description="The tasks it waits for, in the order given (empty in lists).")
    ]
    children: Annotated[
        list[Child],
        Keywords(description="The first 100 tasks that wait for it, oldest first (empty in lists)."),
    ]
    children_count: Annotated[int, Keywords(minimum=0, description="How many tasks wait for it.")]


class TaskSnapshot(TaskFields):
    """A task's snapshot in a progress stream."""

    errors: NotRequired[
        Annotated[
            list[ErrorSummary],
            Keywords(
                description="The first failed/error jobs (as many as the stream's `errors` asks), in the "
                "first snapshot, the last (`end`) and whenever they change; absent: unchanged."
            ),
        ]
    ]


class TaskWarning(TypedDict):
    code: Annotated[
        str,
        Keywords(
            enum=["no_worker"],
            description="`no_worker`: no live worker process listens to the task's queue.",
        ),
    ]
    message: str


class CreatedTask(TypedDict):
    """The task just created."""

    task_id: str
    job: str
    items: Annotated[int, Keywords(minimum=1, description="Items received.")]
    jobs: Annotated[
        int,
        Keywords(
            minimum=1,
            description="Jobs enqueued: items / chunk_size, rounded up, or more with a concurrency_key (a "
            "chunk holds items of one key).",
        ),
    ]
    chunk_size: Annotated[int, Keywords(minimum=1)]
    status: TaskStatusName
    feed: Feed | None
    urls: Urls
    warnings: Annotated[
        list[TaskWarning],
        Keywords(
            description="What is worth knowing though the task was created (its jobs wait until a worker "
            "listens to their queue, say); empty when nothing is."
        ),
    ]


class RetryResult(TypedDict):
    """The outcome of a retry."""

    retried: Annotated[Count, Keywords(description="Jobs enqueued again.")]
    task: Task


class TaskPage(TypedDict):
    """Tasks, newest first."""

    items: list[Task]
    next: Annotated[
        str | None, Keywords(pattern=TASK_CURSOR, description="Pass as `before` for the next page.")
    ]


class FailedItem(TypedDict):
    """An item that failed in its job's chunk; the job went on with the next one."""

    id: Annotated[int, Keywords(minimum=1)]
    job_id: Annotated[str, Keywords(description="The job whose chunk held it.")]
    position: Annotated[Count, Keywords(description="Its place in the job's chunk, from 0.")]
    item: Annotated[Any, Keywords(description="The item as given, or its JSON text cut when over 4 KB.")]
    message: Annotated[str, Keywords(description="Why it failed (the `JobFailed` message).")]
    at: Annotated[DateTime, Keywords(description="When it failed.")]


class FailedItemPage(TypedDict):
    """Failed items in the task's order of items: its jobs' order, then each item's place in its
    chunk."""

    items: list[FailedItem]
    next: Annotated[
        str | None, Keywords(pattern=ITEM_CURSOR, description="Pass as `after` for the next page.")
    ]


class EventPage(TypedDict):
    """Events, oldest first."""

    items: list[Event]
    next: Annotated[
        str | None, Keywords(pattern=EVENT_CURSOR, description="Pass as `after` for the next page.")
    ]


class StreamEvent(TypedDict):
    """One Server-Sent Event of `GET /api/tasks/{task_id}/stream` (fields as parsed)."""

    event: Literal["progress", "end"]
    data: Annotated[
        str,
        Keywords(
            contentMediaType="application/json",
            contentSchema={"$ref": "#/components/schemas/TaskSnapshot"},
            description="The task's snapshot (JSON on one line).",
        ),
    ]
    id: NotRequired[str]
    retry: NotRequired[Annotated[Count, Keywords(description="Milliseconds to wait before reconnecting.")]]


# --- jobs and keys --------------------------------------------------------------------------------


class Job(TypedDict):
    """A job the API may create tasks of."""

    name: str
    queue: Annotated[str, Keywords(description="The job's default queue.")]
    description: Annotated[str | None, Keywords(description="The first line of the job's docstring.")]
    schema: Annotated[dict[str, Any] | None, Keywords(description="The JSON Schema one item must match.")]


class Jobs(TypedDict):
    """Submittable jobs, by name."""

    jobs: list[Job]


class JobStop(TypedDict):
    jid: str
    state: Annotated[
        Literal["stopped", "stopping"],
        Keywords(
            description="`stopped`: in the stopped set, it does not run until resumed; `stopping`: its "
            "worker parks it at its next checkpoint (or a worker parks it when it takes it)."
        ),
    ]


class JobResume(TypedDict):
    jid: str
    state: Literal["enqueued"]
    queue: Annotated[str, Keywords(description="The queue it went back to.")]


class BusyKey(TypedDict):
    """A concurrency key with jobs holding or waiting for its slots."""

    key: Annotated[
        str, Keywords(minLength=1, description="The key, as the task's `concurrency_key` gave it.")
    ]
    limit: Annotated[int, Keywords(minimum=1, description="How many of its jobs may hold slots at once.")]
    holding: Annotated[Count, Keywords(description="How many of its jobs hold slots.")]
    holders: Annotated[
        list[str],
        Keywords(
            maxItems=MAX_HOLDERS,
            description="The jids holding slots (queued to run, running, or awaiting a retry), the "
            f"first {MAX_HOLDERS}.",
        ),
    ]
    waiting: Annotated[Count, Keywords(description="How many of its jobs wait for a slot.")]


class BusyKeys(TypedDict):
    """Busy keys, those with most jobs waiting first."""

    items: Annotated[list[BusyKey], Keywords(maxItems=MAX_KEYS)]


# --- the deployment's: schedules and queues -------------------------------------------------------


class Schedule(TypedDict):
    """A periodic schedule, as the workers declared it to the broker."""

    name: Annotated[str, Keywords(minLength=1)]
    job: Annotated[str, Keywords(description="The job each tick enqueues.")]
    cron: Annotated[
        str,
        Keywords(
            description="Five fields (minute, hour, day of month, month, day of week), or six with a "
            "leading seconds field."
        ),
    ]
    tz: Annotated[str, Keywords(description="The time zone the cron expression is read in (IANA name).")]
    queue: Annotated[str, Keywords(description="The queue its jobs go to.")]
    catch_up: Annotated[
        str,
        Keywords(
            description="What a worker enqueues of the ticks missed while every worker was down: "
            "`latest`, `all` or `none`."
        ),
    ]
    paused: Annotated[bool, Keywords(description="Its ticks pass without a job until it is resumed.")]
    next_run: Annotated[
        DateTime | None,
        Keywords(
            description="Its next tick (also while paused); null if its cron expression or time zone "
            "cannot be read, or it has no tick within a year."
        ),
    ]
    last_run: Annotated[
        DateTime | None,
        Keywords(
            description="The last tick it passed, enqueued or not (paused, not caught up); for a "
            "schedule that has not ticked since it was first declared, its latest tick before that."
        ),
    ]
    last_jid: Annotated[str | None, Keywords(description="The jid of the last job it enqueued.")]
    last_enqueued_at: Annotated[DateTime | None, Keywords(description="When its last job was enqueued.")]


class Schedules(TypedDict):
    """The periodic schedules, by name."""

    schedules: list[Schedule]


class Queue(TypedDict):
    """A queue of the broker."""

    name: Annotated[str, Keywords(minLength=1)]
    size: Annotated[Count, Keywords(description="Jobs waiting in it (not those running).")]
    latency: Annotated[
        float,
        Keywords(minimum=0, description="Seconds its oldest waiting job has waited; 0 when it is empty."),
    ]
    paused: Annotated[
        bool,
        Keywords(description="No worker takes its jobs until it is resumed; pushes still land in it."),
    ]


class ClearedQueue(Queue):
    """The queue after it was cleared."""

    cleared: Annotated[Count, Keywords(description="How many waiting jobs were deleted.")]


class Queues(TypedDict):
    """Every queue the broker knows, by name: those with jobs, and the paused ones."""

    queues: list[Queue]


# --- the service ----------------------------------------------------------------------------------


class Health(TypedDict):
    status: Literal["ok"]


class ReadyChecks(TypedDict):
    broker: Literal["ok"]
    database: Literal["ok"]


class Ready(TypedDict):
    status: Literal["ready"]
    checks: ReadyChecks
