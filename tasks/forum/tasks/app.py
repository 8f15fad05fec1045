"""The app: a registry of tasks, and the producer's and the worker's way in.

::

    app = App(nodes=["http://10.0.0.1:7000", "http://10.0.0.2:7000"],
              redis="redis://10.0.0.9:6379/0")

    @app.task(retries=5, timeout=30, retry_on=(IOError,))
    async def resize(ctx, image_id: int, size: int) -> str:
        ...

    async with app:
        job = await app.enqueue("resize", image_id=7, size=256, _delay=10)
        print(await job.result(timeout=60))

A worker runs all of an app's tasks (or those of the queues it is given:
:mod:`forum.tasks.queues`): ``forum worker --app myapp:app``, or
``await app.run_worker()``, or a :class:`forum.coordinator.Worker` of your own from
:meth:`App.worker`. What a job's bytes are: :mod:`forum.tasks.message`; how a job
is run: :mod:`forum.tasks.runner`; how its status is found: :mod:`forum.tasks.status`.

**Retention.** A result that is not ``None`` is kept ``result_ttl`` seconds
(the app's, or the task's), and so is a dead job's error and traceback. The
Lens's done marker, which turns every copy of a finished job away and says
"done" with or without a result, lasts the Lens's retention
(``LensConfig.retention``: ``forget_after`` + 1 h, 25 h by default, or
``done_ttl``). A result kept longer than the marker is still served as done; once
the marker has gone, the same key enqueued again runs again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import UTC, tzinfo
from typing import Any, TypeVar, overload

from forum.coordinator import Backoff, Lens, Worker
from forum.coordinator.deadletter import DEFAULT_DEAD_PREFIX
from forum.coordinator.errors import LensUnavailable
from forum.coordinator.keys import DEFAULT_NAMESPACE
from forum.coordinator.redis_url import DEFAULT_REDIS_URL
from forum.coordinator.worker import DEFAULT_CONCURRENCY, DEFAULT_LEASE, default_owner
from forum.node.client.cluster import ClusterClient
from forum.node.client.pool import node_urls
from forum.node.config.node import DEFAULT_NODE
from forum.node.core.errors import TooFewCopies
from forum.node.core.resource import AsyncResource
from forum.node.core.tracing import tracer
from forum.tasks import admin, bulk, cron, search
from forum.tasks.authority import CancelOutcome, HistoryEvent, TaskAuthority
from forum.tasks.bulk import Signature
from forum.tasks.cluster import AppCluster, worker_cluster
from forum.tasks.cron import Periodic, Slot
from forum.tasks.enqueue import Enqueue, OneNode, Prepared, Writer, prepare
from forum.tasks.enqueued import EnqueuedRecords
from forum.tasks.errors import InvalidJob
from forum.tasks.executor import process_pool
from forum.tasks.handle import JobHandle, JobState, JobStatus, run_sync
from forum.tasks.hooks import AppHooks, Hooks, State
from forum.tasks.limits import LimitKey, task_admission
from forum.tasks.message import check_key, check_task_name
from forum.tasks.queues import Served, lanes, queues_of
from forum.tasks.runner import Runner, TaskWorker
from forum.tasks.search import JobCounts, SearchPage
from forum.tasks.serializer import JsonSerializer, Serializer
from forum.tasks.status import job_status
from forum.tasks.task import ErrorTypes, Task, TaskOptions, errors_of

log = logging.getLogger(__name__)

#: The app opened by the innermost ``async with`` around the running code
#: (:meth:`App.opened`); a task created inside it sees it too.
_OPENED: ContextVar[App | None] = ContextVar("forum_tasks_opened_app", default=None)

T = TypeVar("T")

#: The defaults of an app, which ``forum worker`` and ``forum jobs`` share.
DEFAULT_PREFIX = b"task/"
DEFAULT_RESULT_TTL = 86400.0
DEFAULT_DEDUP_WINDOW = 3600.0


@dataclass(slots=True)
class _Connections(AsyncResource):
    """What an open app holds: its cluster (its nodes, failing over), the
    Lens, and the enqueued records on their way to it."""

    nodes: AppCluster
    lens: Lens
    records: EnqueuedRecords

    async def aclose(self) -> None:
        try:
            await self.records.aclose()
            await self.nodes.aclose()
        finally:
            await self.lens.aclose()


class App(AppHooks):
    """Tasks by name, and the nodes and Redis their jobs go through; its
    hooks and middleware (``@app.on_startup``, ...: :class:`AppHooks`)."""

    def __init__(
        self,
        nodes: str | Sequence[str] = DEFAULT_NODE,
        redis: str = DEFAULT_REDIS_URL,
        *,
        prefix: bytes = DEFAULT_PREFIX,
        serializer: Serializer | None = None,
        result_ttl: float = DEFAULT_RESULT_TTL,
        dedup_window: float = DEFAULT_DEDUP_WINDOW,
        token: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        dead_prefix: bytes = DEFAULT_DEAD_PREFIX,
    ) -> None:
        if not isinstance(prefix, bytes) or not prefix or b"\n" in prefix:
            raise ValueError(f"an app prefix is non-empty bytes without a newline, not {prefix!r}")
        if dead_prefix.startswith(prefix) or prefix.startswith(dead_prefix):
            raise ValueError(f"the dead prefix {dead_prefix!r} and the prefix {prefix!r} overlap")
        for name, value in (("result_ttl", result_ttl), ("dedup_window", dedup_window)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if serializer is not None and not isinstance(serializer, Serializer):
            raise ValueError(f"a serializer has name, dumps and loads; {serializer!r} has not")
        self.nodes = node_urls(nodes)
        self.redis = redis
        self.prefix = prefix
        self.dead_prefix = dead_prefix
        self.serializer: Serializer = serializer or JsonSerializer()
        self.result_ttl = float(result_ttl)
        self.dedup_window = float(dedup_window)
        self.namespace = namespace
        self._token = token
        #: The app's tasks, by name.
        self.tasks: dict[str, Task] = {}
        #: The periodic tasks (``@app.cron``); each worker runs their slots.
        self.periodic: list[Periodic] = []
        #: Its lifecycle hooks and middleware (forum.tasks.hooks).
        self.hooks = Hooks()
        self._open: _Connections | None = None
        self._entered: Token[App | None] | None = None

    def __repr__(self) -> str:
        return f"<App {self.prefix!r} tasks={sorted(self.tasks)}>"

    @property
    def token(self) -> str | None:
        """The nodes' client token the app was given (``None``: none)."""
        return self._token

    def using(
        self,
        *,
        nodes: str | Sequence[str] | None = None,
        redis: str | None = None,
        token: str | None = None,
        namespace: str | None = None,
    ) -> App:
        """A closed copy of this app with other connection settings (those
        given), sharing its tasks, periodic tasks, prefix, serializer and
        retention: how ``forum worker --app`` and ``forum jobs`` apply their
        flags to an app they import."""
        copy = App(
            self.nodes if nodes is None else nodes,
            self.redis if redis is None else redis,
            prefix=self.prefix, serializer=self.serializer, result_ttl=self.result_ttl,
            dedup_window=self.dedup_window, token=self._token if token is None else token,
            namespace=self.namespace if namespace is None else namespace,
            dead_prefix=self.dead_prefix,
        )  # fmt: skip
        copy.tasks = self.tasks
        copy.periodic = self.periodic
        copy.hooks = self.hooks
        return copy

    # -- defining tasks -----------------------------------------------------------------

    @overload
    def task(self, name: Callable[..., Any], /) -> Task: ...

    @overload
    def task(
        self,
        name: str | None = None,
        *,
        retries: int = 3,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        retry_on: type[BaseException] | ErrorTypes = (Exception,),
        give_up_on: type[BaseException] | ErrorTypes = (),
        result_ttl: float | None = None,
        priority: int | None = None,
        ttl: float | None = None,
        rate_limit: str | None = None,
        concurrency: int | None = None,
        limit_key: LimitKey | None = None,
        max_running: int | None = None,
        rate: str | None = None,
        executor: str | None = None,
        soft_timeout: float | None = None,
        queue: str | None = None,
    ) -> Callable[[Callable[..., Any]], Task]: ...

    def task(
        self,
        name: str | Callable[..., Any] | None = None,
        *,
        retries: int = 3,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        retry_on: type[BaseException] | ErrorTypes = (Exception,),
        give_up_on: type[BaseException] | ErrorTypes = (),
        result_ttl: float | None = None,
        priority: int | None = None,
        ttl: float | None = None,
        rate_limit: str | None = None,
        concurrency: int | None = None,
        limit_key: LimitKey | None = None,
        max_running: int | None = None,
        rate: str | None = None,
        executor: str | None = None,
        soft_timeout: float | None = None,
        queue: str | None = None,
    ) -> Task | Callable[[Callable[..., Any]], Task]:
        """``@app.task`` or ``@app.task(name, retries=..., ...)``: register
        the function as a task (its name: ``name``, else the function's
        ``__name__``); the options are :class:`forum.tasks.task.TaskOptions`."""
        options = TaskOptions(
            retries=retries, backoff=backoff or Backoff(), timeout=timeout,
            retry_on=errors_of(retry_on), give_up_on=errors_of(give_up_on),
            result_ttl=result_ttl, priority=priority, ttl=ttl,
            rate_limit=rate_limit, concurrency=concurrency, limit_key=limit_key,
            max_running=max_running, rate=rate, queue=queue,
            executor=executor, soft_timeout=soft_timeout,
        )  # fmt: skip
        if callable(name):
            return self.add_task(name.__name__, name, options)

        def register(function: Callable[..., Any]) -> Task:
            return self.add_task(name or str(getattr(function, "__name__", "")), function, options)

        return register

    def add_task(self, name: str, function: Callable[..., Any], options: TaskOptions) -> Task:
        """Register ``function`` as task ``name``; ``InvalidJob`` for a bad
        name or one taken."""
        check_task_name(name)
        if name in self.tasks:
            raise InvalidJob(f"the app has a task named {name!r} already")
        task = self.tasks[name] = Task(self, name, function, options)
        return task

    def cron(
        self,
        expression: str | None = None,
        *,
        every: float | None = None,
        name: str | None = None,
        tz: tzinfo = UTC,
        **options: Any,
    ) -> Callable[[Callable[..., Any]], Task]:
        """``@app.cron("*/5 * * * *")`` or ``@app.cron(every=seconds)``: a
        task (``options`` as :meth:`task`'s) enqueued at each slot of its
        schedule by every worker, and run once per slot: the slot is the job
        key (:mod:`forum.tasks.cron`)."""
        when = cron.schedule(expression, every=every, tz=tz)

        def register(function: Callable[..., Any]) -> Task:
            task = self.task(name, **options)(function)
            try:
                task.check_arguments((), {})  # each slot's job has no arguments: refused now
            except InvalidJob:
                del self.tasks[task.name]
                raise
            self.periodic.append(cron.Periodic(task.name, when))
            return task

        return register

    # -- connections --------------------------------------------------------------------

    def connect(self) -> _Connections:
        """New clients of the app's nodes and Redis (the caller closes them)."""
        lens = Lens.from_url(self.redis, namespace=self.namespace)
        return _Connections(AppCluster(self.nodes, self._token), lens, EnqueuedRecords(lens))

    async def __aenter__(self) -> App:
        if self._open is not None:
            raise RuntimeError("the app is open already")
        self._open = self.connect()
        self._entered = _OPENED.set(self)
        return self

    async def __aexit__(self, *exc: object) -> None:
        entered, self._entered = self._entered, None
        if entered is not None:
            with contextlib.suppress(ValueError):  # exited in another context than entered
                _OPENED.reset(entered)
        await self.aclose()

    def opened(self) -> App:
        """This app, or when it is closed, the copy of it (:meth:`using`: the
        same tasks) opened by the ``async with`` around the calling code: the
        app a :class:`Task`'s calls go to, so ``async with app.using(...):``
        serves ``task.enqueue(...)`` as it serves ``app.enqueue(...)``."""
        if self._open is None:
            current = _OPENED.get()
            if current is not None and current.tasks is self.tasks:
                return current
        return self

    async def aclose(self) -> None:
        opened, self._open = self._open, None
        if opened is not None:
            await asyncio.shield(opened.aclose())

    def _connections(self) -> _Connections:
        if self._open is None:
            raise RuntimeError("the app is not open: use `async with app:` around its calls")
        return self._open

    @property
    def lens(self) -> TaskAuthority:
        """The open app's Lens."""
        return self._connections().lens

    @property
    def space(self) -> ClusterClient:
        """The open app's cluster (its nodes as one group until its first
        call has taken the map: :class:`forum.tasks.cluster.AppCluster`)."""
        return self._connections().nodes.space

    async def on_node(self, operation: Callable[[ClusterClient], Awaitable[T]]) -> T:
        """``operation(space)`` on the open app's cluster, its map taken
        first (:class:`forum.tasks.cluster.AppCluster`): a keyed write to its
        group, reads over the groups, each failing over inside a group."""
        return await self._connections().nodes.call(operation)

    # -- enqueueing ---------------------------------------------------------------------

    async def enqueue(self, name: str, /, *args: Any, **kwargs: Any) -> JobHandle:
        """Write a job of task ``name`` (its arguments after it) and return
        its handle. The keyword arguments named ``_`` and a field of
        :class:`Enqueue` are the enqueue's options, the others the task's.
        The job key is ``_key``, or the call's default key (the
        same call, the same job: :mod:`forum.tasks.message`); ``_delay`` /
        ``_not_before``, ``_priority`` and ``_ttl`` are the write's
        (docs/scheduling.md; ``_priority`` and ``_ttl`` default to the
        task's); ``_retries`` and ``_timeout`` override the task's;
        ``_queue`` overrides the task's queue (:mod:`forum.tasks.queues`);
        ``_copies`` is the write's (answered once so many nodes hold the job
        durably, docs/tasks.md; the node's ``--ack-copies`` when not given).
        A job short of its copies in time raises ``CopiesShort`` (from
        ``forum``'s errors): it is enqueued all the same, on fewer nodes.

        The tuple goes to the key's group, to the first member that answers
        (the next group when none does: :mod:`forum.node.client.cluster`);
        then the Lens gets the job's ``enqueued`` record (for status), best
        effort: Redis being down does not fail an enqueue that is safe in the
        space. Bad input is an ``InvalidJob`` or ``UnknownTask`` and writes
        nothing; ``NodeUnavailable`` when no node answered.
        """
        given = Enqueue.taken_from(kwargs)
        connections = self._connections()
        return await self._enqueue(
            connections.nodes, connections.records, name, args=args, kwargs=kwargs, given=given
        )

    def enqueue_sync(self, name: str, /, *args: Any, **kwargs: Any) -> JobHandle:
        """:meth:`enqueue` from code that is not async: on a loop of its own,
        with connections of its own, closed before it returns. Refused
        inside a running loop (it would block it): await :meth:`enqueue`."""
        handle = run_sync(self, lambda app: app.enqueue(name, *args, **kwargs), "enqueue")
        return handle.on(self)  # this app's: the copy that wrote it is closed

    async def enqueue_many(self, calls: Sequence[Signature]) -> list[JobHandle]:
        """Enqueue many jobs, ``[task.s(*args, **kwargs), ...]``, in one round
        trip per replica group; their handles, in order. Every job is checked
        before anything is written (:mod:`forum.tasks.bulk`)."""
        connections = self._connections()
        traces = tracer()
        if traces is None:
            return await bulk.enqueue_many(self, connections.nodes, connections.records, calls)
        from forum.tasks.tracing import enqueue_many_span  # noqa: PLC0415  (loads opentelemetry: only when on)

        with enqueue_many_span(traces, len(calls)):  # each job carries it: their runs' parent
            return await bulk.enqueue_many(self, connections.nodes, connections.records, calls)

    def enqueue_many_sync(self, calls: Sequence[Signature]) -> list[JobHandle]:
        """:meth:`enqueue_many` from code that is not async (as :meth:`enqueue_sync`)."""
        handles = run_sync(self, lambda app: app.enqueue_many(calls), "enqueue_many")
        return [handle.on(self) for handle in handles]

    async def enqueue_slot(self, slot: Slot, space: Any, lens: TaskAuthority) -> JobHandle:
        """A periodic task's job for ``slot``, written by a worker into its own
        space (:func:`forum.tasks.cron.run_periodic` calls it)."""
        # With a ttl: its record is not deferred. At the highest priority: ahead
        # of any backlog of its queue, so the slot runs before it expires.
        given = Enqueue(key=slot.key, ttl=slot.ttl, priority=cron.SLOT_PRIORITY)
        records = EnqueuedRecords(lens)
        return await self._enqueue(
            OneNode(space), records, slot.task, args=(), kwargs={}, given=given
        )

    async def _enqueue(
        self,
        nodes: Writer,
        records: EnqueuedRecords,
        name: str,
        *,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        given: Enqueue,
    ) -> JobHandle:
        traces = tracer()
        if traces is None:  # tracing off: no span
            return await self._write(nodes, records, name, prepare(self, name, args, kwargs, given))
        from forum.tasks.tracing import enqueue_span, sent  # noqa: PLC0415  (loads opentelemetry: only when on)

        with enqueue_span(traces, name) as span:  # current: prepare puts it in the job
            job = prepare(self, name, args, kwargs, given)
            sent(span, job.key, job.queue)
            return await self._write(nodes, records, name, job)

    async def _write(
        self, nodes: Writer, records: EnqueuedRecords, name: str, job: Prepared
    ) -> JobHandle:
        """Write a prepared job, then its ``enqueued`` record (:meth:`enqueue`)."""
        short: TooFewCopies | None = None
        try:
            await nodes.call(lambda space: space.write(job.payload, **job.options))
        except TooFewCopies as exc:
            short = exc  # enqueued all the same: its record goes in, then the caller hears
        await records.note(job.key, job.fields, job.lasting, background=job.background)
        if short is not None:
            raise short
        return JobHandle(self, job.key, name)

    # -- jobs ---------------------------------------------------------------------------

    def job(self, key: str) -> JobHandle:
        """The handle of job ``key`` (``InvalidJob`` for a key no job can have)."""
        return JobHandle(self, check_key(key))

    async def status(self, key: str) -> JobStatus:
        """:meth:`JobHandle.status` of ``key``."""
        connections = self._connections()
        return await connections.nodes.call(
            lambda space: job_status(
                check_key(key), lens=connections.lens, space=space, prefix=self.prefix,
                dead_prefix=self.dead_prefix, serializer=self.serializer, queues=queues_of(self),
            )
        )  # fmt: skip

    # -- workers ------------------------------------------------------------------------

    def worker(
        self,
        space: Any,
        lens: TaskAuthority,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        lease: float = DEFAULT_LEASE,
        executor: str = "thread",
        queues: Served | None = None,
        **worker_options: Any,
    ) -> Worker:
        """A :class:`forum.coordinator.Worker` that runs this app's tasks from
        ``space`` (a ``WorkSpace``: ``ForumClient``, ``Forum``) under claims
        from ``lens``, sync ones in a pool of ``concurrency`` threads (shut
        down with the worker) or, those whose executor, else the worker's
        ``executor``, is ``"process"``, of as many processes
        (:mod:`forum.tasks.executor`), and this app's periodic tasks beside them.
        ``queues``: those it serves, by weight (``{"emails": 3, "default":
        1}``), or all (``None``): :func:`forum.tasks.queues.lanes`.
        ``worker_options`` are the Worker's (``max_attempts`` defaults to
        one past the most retries of any task: a job's own count decides its
        retries, and this one only buries a job whose workers keep dying)."""
        if not self.tasks:
            raise InvalidJob("the app has no tasks: nothing for a worker to run")
        worker_options.setdefault(
            "max_attempts", 1 + max(t.options.retries for t in self.tasks.values())
        )
        worker_options.setdefault("dead_prefix", self.dead_prefix)
        worker_options.setdefault("admission", task_admission(self, lens))
        processes = process_pool(self.tasks.values(), executor, concurrency)
        pool = ThreadPoolExecutor(concurrency, thread_name_prefix="task")
        state: State = {}  # the worker's, filled by the app's startup hooks: ctx.state
        return TaskWorker(
            self, pool, space, lens, lanes(self, queues),
            Runner(self, lens, pool, state=state, space=OneNode(space), processes=processes),
            concurrency=concurrency, lease=lease, state=state, processes=processes,
            **worker_options,
        )  # fmt: skip

    async def run_worker(
        self,
        node: str | None = None,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        lease: float = DEFAULT_LEASE,
        stop: asyncio.Event | None = None,
        queues: Served | None = None,
        **worker_options: Any,
    ) -> Worker:
        """Run a worker of this app against the cluster ``node`` (default:
        the app's nodes) serves the map of, and the app's Redis, until
        ``stop`` is set (or the task is cancelled); the worker, drained, once
        it is over. Its home group is placed by its ``owner``; it steals by
        the directory in Redis, and publishes it, as ``forum worker`` does
        (:func:`forum.tasks.cluster.worker_cluster`). ``queues``: as
        :meth:`worker`'s. ``LensError`` at once when Redis cannot be reached."""
        owner = worker_options.setdefault("owner", default_owner())
        lens = Lens.from_url(self.redis, namespace=self.namespace)
        urls = [node] if node else self.nodes
        async with lens, worker_cluster(urls, self._token, lens.config, owner) as space:
            try:
                await lens.ping()
            except LensUnavailable as exc:
                if exc.misconfigured or exc.reason == "unreachable":
                    raise
                log.warning("the Lens is unavailable (%s: %s): waiting for it", exc.reason, exc)
            worker = self.worker(space, lens, concurrency=concurrency, lease=lease,
                                 queues=queues, **worker_options)  # fmt: skip
            async with asyncio.TaskGroup() as group:
                running = group.create_task(worker.run(), name="worker")
                if stop is not None:
                    group.create_task(_stop_when(stop, worker, running), name="worker stop")
            return worker

    # -- inspection (the CLI's) ---------------------------------------------------------

    def jobs(
        self, state: JobState | None = None, limit: int = 100, task: str | None = None
    ) -> AsyncIterator[JobStatus]:
        """The newest ``limit`` jobs, in ``state`` and of ``task`` when given,
        from the space and the Lens (:func:`forum.tasks.admin.listing`)."""
        return admin.jobs(self, state, limit, task)

    async def counts(self) -> JobCounts:
        """How many jobs in each state, per task, from the Lens's job index
        (:func:`forum.tasks.search.counts`)."""
        return await search.counts(self)

    async def search(
        self,
        *,
        state: JobState | None = None,
        task: str | None = None,
        key: str | None = None,
        text: str | None = None,
        since: float | None = None,
        until: float | None = None,
        newest_first: bool = True,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SearchPage:
        """A page of jobs from the Lens's job index, sorted by when each last
        changed state, filtered by state, task, key prefix, text in the
        arguments and time range (:func:`forum.tasks.search.search`)."""
        return await search.search(
            self, state=state, task=task, key=key, text=text, since=since, until=until,
            newest_first=newest_first, limit=limit, cursor=cursor,
        )  # fmt: skip

    async def cancel(self, key: str) -> CancelOutcome:
        """Cancel a job, queued or running (:func:`forum.tasks.admin.cancel`)."""
        return await admin.cancel(self, key)

    async def retry(self, key: str) -> JobHandle:
        """A dead job back to work (:func:`forum.tasks.admin.retry`)."""
        return await admin.retry(self, key)

    async def purge(self, state: JobState = JobState.DEAD) -> int:
        """Drop the dead jobs, or the done ones' results; how many
        (:func:`forum.tasks.admin.purge`)."""
        return await admin.purge(self, state)

    async def history(self, key: str) -> list[HistoryEvent]:
        """A job's claim history, oldest first (:func:`forum.tasks.admin.history`)."""
        return await admin.history(self, key)


async def _stop_when(stop: asyncio.Event, worker: Worker, running: asyncio.Task[None]) -> None:
    """Stop ``worker`` once ``stop`` is set (or return when it ended by itself)."""
    waiting = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((waiting, running), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    worker.stop()
