"""The task layer: named functions with arguments, results and status, on
Forum's guarantees (docs/tasks.md).

One concept per module::

    app.py         App: the registry of tasks, enqueue, status, workers
    task.py        Task and TaskOptions: a function and its retry policy
    message.py     the byte format of a job tuple, and the default job key
    serializer.py  JSON and msgpack, or a Serializer of your own
    context.py     Context: what a task is given (token, verify, progress)
    handle.py      JobHandle, JobStatus, JobState
    status.py      how a job's status is worked out
    nodes.py       failing over across a cluster's nodes
    enqueued.py    the producer's record of a job (best effort)
    enqueue.py     an enqueue's options, the job prepared from them, where it is written
    runner.py      the handler (and Worker) that runs an app's tasks
    hooks.py       lifecycle hooks and middleware around a worker and its jobs
    bulk.py        Signature (a call), and many jobs enqueued in one round trip
    canvas.py      chains and groups of calls, on deterministic keys
    admin.py       listing, cancelling, retrying and purging jobs (the CLI's)
    search.py      counting and searching jobs by the Lens's job index
    cron.py        periodic tasks
    authority.py   what the task layer needs of the Lens
    errors.py      every error, under TaskError

Built on ``forum.coordinator`` (the worker, the Lens) and ``forum.node`` (the space):
a job is a tuple, its run a claim, its result a fenced record.
"""

from forum.tasks.app import App
from forum.tasks.bulk import Signature
from forum.tasks.canvas import WorkflowHandle, WorkflowStatus, chain, group
from forum.tasks.context import Context
from forum.tasks.errors import (
    InvalidJob,
    JobCancelled,
    JobExpired,
    JobFailed,
    JobNotFound,
    ResultTimeout,
    SoftTimeout,
    StartupFailed,
    TaskError,
    UnknownTask,
)
from forum.tasks.handle import JobHandle, JobState, JobStatus
from forum.tasks.hooks import JobInfo, Middleware
from forum.tasks.search import JobCounts, SearchPage
from forum.tasks.serializer import JsonSerializer, MsgpackSerializer, Serializer
from forum.tasks.task import Task, TaskOptions

__all__ = [
    "App",
    "Context",
    "InvalidJob",
    "JobCancelled",
    "JobCounts",
    "JobExpired",
    "JobFailed",
    "JobHandle",
    "JobInfo",
    "JobNotFound",
    "JobState",
    "JobStatus",
    "JsonSerializer",
    "Middleware",
    "MsgpackSerializer",
    "ResultTimeout",
    "SearchPage",
    "Serializer",
    "Signature",
    "SoftTimeout",
    "StartupFailed",
    "Task",
    "TaskError",
    "TaskOptions",
    "UnknownTask",
    "WorkflowHandle",
    "WorkflowStatus",
    "chain",
    "group",
]
