"""``forum worker``: take jobs from a node, claim them in the Lens, run them.

Two kinds of worker, one of them per process:

* ``--app module:name`` names a task app (:class:`forum.App`): the worker
  runs all of its tasks (or those of ``--queues``, by weight:
  :mod:`forum.tasks.queues`), and its periodic tasks' slots (docs/tasks.md). The
  prefix, the dead prefix and each task's retries come from the app; the
  node and Redis too, unless ``--node`` / ``--redis-url`` (or
  ``$FORUM_NODE`` / ``$FORUM_REDIS_URL``) say otherwise.
* ``--handler module:name`` (with ``--prefix``) names the byte-level
  handler: either an ``async def handler(job)``, or a function of no
  arguments returning an async context manager that yields one (so a handler
  can open its connections once and close them at exit)::

    @contextlib.asynccontextmanager
    async def open_handler():
        async with Store.connect() as store:
            yield lambda job: store.put(job.key, job.token, job.payload)

The ``--app``, ``--node`` and ``--redis-url`` options, which ``forum jobs``
has too, and loading the user's ``module:name`` are :mod:`forum.cli_app`'s;
what ``--app``, or ``--handler`` and ``--key``, name, loaded and the handler
opened, is :mod:`forum.cli_usercode`'s.

At start the worker prints, loudly, every way its Redis falls short of what
the guarantees rest on (``Lens.durability``: AOF off, an eviction policy).
An app's worker also refuses to start without Redis (one line, exit 2): a
task worker is a deployment that was meant to have one. A handler's worker
waits for Redis instead (an outage is not a mistake), failing closed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import Any

from forum.cli_app import (
    Where,
    app_option,
    cluster_space,
    node_from_app,
    node_urls_of,
    redis_options,
)
from forum.cli_args import (
    COUNT,
    COUNT_OR_ZERO,
    EXIT_FAILED,
    EXIT_OK,
    NONEMPTY,
    PORT,
    SECONDS,
    SECONDS_OR_ZERO,
    UsageError,
)
from forum.cli_dead import dead_letter_options
from forum.cli_otel import add_otel, otel_export
from forum.cli_usercode import UserCode, load_user_code, open_handler
from forum.coordinator.deadletter import DEFAULT_DEAD_PREFIX
from forum.coordinator.errors import LensError, LensUnavailable
from forum.coordinator.job import Backoff
from forum.coordinator.keys import HISTORY_TTL
from forum.coordinator.lens import Lens
from forum.coordinator.metrics import serve_metrics, worker_registry
from forum.coordinator.redis_url import masked
from forum.coordinator.stats import WorkerStats
from forum.coordinator.worker import (
    DEFAULT_CONCURRENCY,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_LEASE,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TAKE_WAIT,
    Worker,
    default_owner,
)
from forum.node.client.cluster import ClusterClient
from forum.node.config.node import FORGET_AFTER
from forum.node.core.cancellation import wait_event
from forum.node.core.errors import ClientError, Unauthorized
from forum.node.core.space import Pattern
from forum.tasks import App
from forum.tasks.errors import StartupFailed, TaskError
from forum.tasks.queues import parse_weights

# Its log lines' name, which log filters select them by.
log = logging.getLogger("coordinator.cli")

#: How often the progress line is redrawn on a terminal, and printed to a log.
_PROGRESS_TTY, _PROGRESS_LOG = 1.0, 10.0
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


# -- the options -------------------------------------------------------------------


def add_worker(parser: argparse.ArgumentParser) -> None:
    """The options of ``forum worker``."""
    parser.description = (
        "Run all the tasks of --app, or --handler on the jobs matching --prefix: take "
        "jobs from a node, claim each in the Lens (Redis), run it, and complete it. "
        "Failed jobs are retried with backoff, then parked under the dead prefix. SIGTERM "
        "or SIGINT drains: no new takes, running jobs get --drain-timeout seconds, the "
        "rest are handed back."
    )
    parser.epilog = (
        "examples:\n  forum worker --app examples.thumbnails.app:app --concurrency 8\n"
        "  forum worker --node http://127.0.0.1:7070 "
        "--redis-url redis://127.0.0.1:6379/0 \\\n    --prefix job/ "
        "--handler examples.handlers.fenced_redis:open_handler --concurrency 8"
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    dead_letter_options(parser)
    node_from_app(parser)
    parser.set_defaults(dead_prefix=None)  # with --handler: dead/; with --app: the app's
    redis_options(parser)
    app_option(parser)
    add_otel(parser)
    add = parser.add_argument
    add(
        "--wait-replicas",
        metavar="N",
        type=COUNT_OR_ZERO,
        default=0,
        help="every claim and completion waits until N replicas of its Redis have it "
        "(WAIT; fewer within --wait-timeout fails closed; default 0: the primary alone)",
    )
    add(
        "--wait-timeout",
        metavar="SECONDS",
        type=SECONDS,
        default=0.5,
        help="how long --wait-replicas waits (default 0.5; below the Lens's 2 s timeout)",
    )
    add(
        "--wait-aof",
        action="store_true",
        help="wait with WAITAOF instead of WAIT (Redis 7.2+ or Valkey): each claim and "
        "completion fsynced to the primary's AOF and to --wait-replicas replicas' AOFs; "
        "replicas report fsyncs about once a second, so give --wait-timeout 1.5",
    )
    add(
        "--forget-after",
        metavar="SECONDS",
        type=SECONDS,
        default=None,
        help="the nodes' forget_after (default $FORUM_FORGET_AFTER, the variable the nodes "
        "read, else their default 86400): a completed job's done marker turns its copies "
        "away this long plus an hour",
    )
    add(
        "--done-ttl",
        metavar="SECONDS",
        type=SECONDS,
        default=None,
        help="how long a completed job's done marker turns its copies away (default "
        "--forget-after plus an hour; never below --forget-after)",
    )
    add(
        "--history-ttl",
        metavar="SECONDS",
        type=SECONDS_OR_ZERO,
        default=HISTORY_TTL,
        help="keep a job's claim history this long after its last event (default 3600; "
        "0: none; the done marker turns copies away either way)",
    )
    add(
        "--prefix",
        metavar="PREFIX",
        type=NONEMPTY,
        help="with --handler: take tuples starting with this (not empty: '' would take "
        "the dead letters too)",
    )
    add(
        "--queues",
        metavar="NAME[:WEIGHT],...",
        type=_queues,
        help="with --app: serve only these queues, tried at each take in a random order "
        "drawn by weight (emails:3,default:1; a weight left out is 1); default: every "
        "queue of the app, in the space's order (highest priority, then oldest)",
    )
    add(
        "--handler",
        metavar="MODULE:NAME",
        help="an async handler(job), or a factory of an async context manager yielding one",
    )
    add(
        "--key",
        metavar="MODULE:NAME",
        help="with --handler: a function payload -> idempotency key (default: the "
        "tuple's write key, else its entry id)",
    )
    add(
        "--concurrency",
        metavar="N",
        type=COUNT,
        default=DEFAULT_CONCURRENCY,
        help=f"handlers running at once (default {DEFAULT_CONCURRENCY})",
    )
    add(
        "--lease",
        metavar="SECONDS",
        type=SECONDS,
        default=DEFAULT_LEASE,
        help=f"claim lease, renewed while the handler runs (default {DEFAULT_LEASE:g})",
    )
    add(
        "--executor",
        choices=("thread", "process"),
        help="with --app: where sync tasks that name no executor run: a pool of "
        "--concurrency threads (default) or processes (killed at a task's timeout)",
    )
    add(
        "--max-attempts",
        metavar="N",
        type=COUNT,
        help=f"deliveries before a job is dead-lettered (default {DEFAULT_MAX_ATTEMPTS}; "
        "with --app, one past the most retries of any task: each task's own retries "
        "decide, this buries a job whose workers keep dying)",
    )
    add(
        "--backoff",
        metavar="SECONDS",
        type=SECONDS_OR_ZERO,
        help="with --handler: delay before the first retry; doubles each attempt, "
        "jittered (default 1; an app's tasks have their own)",
    )
    add(
        "--drain-timeout",
        metavar="SECONDS",
        type=SECONDS_OR_ZERO,
        default=DEFAULT_DRAIN_TIMEOUT,
        help="how long running handlers may finish after SIGTERM "
        f"(default {DEFAULT_DRAIN_TIMEOUT:g})",
    )
    add(
        "--take-wait",
        metavar="SECONDS",
        type=SECONDS,
        default=DEFAULT_TAKE_WAIT,
        help=f"how long one take waits for a job (default {DEFAULT_TAKE_WAIT:g})",
    )
    add(
        "--owner",
        metavar="NAME",
        help="this worker's name in claims, and in a cluster what places its home group "
        "(default host-pid-random)",
    )
    add(
        "--cluster-map",
        metavar="FILE",
        help="the cluster map (TOML or JSON) to route by, instead of the one the node "
        "serves (a node with a map makes the worker cluster-aware without it)",
    )
    add(
        "--metrics-port",
        metavar="PORT",
        type=PORT,
        help="serve Prometheus /metrics on this port (0: any free one, printed at start)",
    )
    add(
        "--metrics-host",
        metavar="HOST",
        default="127.0.0.1",
        help="the metrics port's address (default 127.0.0.1)",
    )
    add("--no-progress", action="store_true", help="no progress line on stderr")
    add(
        "--log-level",
        metavar="LEVEL",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="DEBUG, INFO (default), WARNING, ERROR",
    )
    parser.set_defaults(func=run_worker)


# -- running it ----------------------------------------------------------------------


async def run_worker(args: argparse.Namespace) -> int:
    """``forum worker``: run until SIGTERM/SIGINT, then drain; exit 0.

    Everything a mistake in the arguments can break is tried before the first
    take (the modules, Redis, the node's token, the metrics port), so that a
    mistake is a :class:`UsageError`, not a worker that runs and does nothing.
    """
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    _check_kind(args)
    # Importing the user's modules reads files: not on the event loop.
    code = await asyncio.to_thread(load_user_code, args)
    if code.app is not None:
        _check_max_attempts(code.app, args.max_attempts)
    where = Where.of(args, code.app)
    try:
        lens = Lens.from_url(
            where.redis_url,
            namespace=where.namespace,
            wait_replicas=args.wait_replicas,
            wait_timeout=args.wait_timeout,
            wait_aof=args.wait_aof,
            forget_after=_forget_after(args),
            done_ttl=args.done_ttl,
            history_ttl=args.history_ttl,
        )
    except ValueError as exc:
        raise UsageError(f"--redis-url, --namespace, --wait-* or --done-ttl: {exc}") from None
    owner = args.owner or default_owner()
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(otel_export(args, "forum-worker"))  # closed last
        await stack.enter_async_context(lens)
        await check_lens(lens, where.redis_url, required=code.app is not None)
        await _warn_durability(lens)
        space = await stack.enter_async_context(
            cluster_space(
                node_urls_of(args, where, code.app), where.token, lens.config,
                cluster_map=args.cluster_map, owner=owner,
            )
        )  # fmt: skip
        await _check_node(space)
        worker = await _make_worker(stack, args, code, space, lens, owner=owner)
        if args.metrics_port is not None:
            await _serve_metrics(stack, worker, args.metrics_host, args.metrics_port)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, worker.stop)
        cluster = space.map
        groups = (
            f" (home group {space.home[0]} of {len(cluster.groups)}, map epoch {cluster.epoch})"
            if len(cluster.groups) > 1
            else ""
        )
        print(
            f"forum worker {worker.owner}: {code.describe(args)} from {where.node}{groups}",
            file=sys.stderr,
            flush=True,
        )
        done = asyncio.Event()
        try:
            async with asyncio.TaskGroup() as tasks:
                if not args.no_progress:
                    tasks.create_task(_progress(worker, done))
                try:
                    await worker.run()
                finally:
                    done.set()
        except* StartupFailed as failed:
            # One line (its hook's traceback is logged above it): no job ran.
            for error in failed.exceptions:
                print(f"forum worker: {error}", file=sys.stderr, flush=True)
            exit_code = EXIT_FAILED
        else:
            exit_code = EXIT_OK
    return exit_code


def _check_kind(args: argparse.Namespace) -> None:
    """One kind of worker, and only the flags that kind has."""
    if (args.app is None) == (args.handler is None):
        raise UsageError(
            "give --app MODULE:NAME (a task app) or --handler MODULE:NAME with --prefix"
        )
    if args.handler is not None and args.prefix is None:
        raise UsageError("--handler needs --prefix: the byte prefix of its jobs")
    if args.handler is not None and args.executor is not None:
        raise UsageError("--executor: only with --app (a handler runs on the event loop)")
    if args.handler is not None and args.queues is not None:
        raise UsageError("--queues: only with --app (a handler's worker takes --prefix)")
    if args.app is not None:
        flags = {"--prefix": args.prefix, "--key": args.key, "--backoff": args.backoff}
        flags["--dead-prefix"] = args.dead_prefix
        given = [flag for flag, value in flags.items() if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)}: not with --app (the app and its tasks set them)")


def _forget_after(args: argparse.Namespace) -> float:
    """``--forget-after``, else ``$FORUM_FORGET_AFTER`` (as the nodes read
    it), else the nodes' default: what the done markers' retention follows."""
    if args.forget_after is not None:
        return float(args.forget_after)
    text = os.environ.get("FORUM_FORGET_AFTER")
    if not text:
        return FORGET_AFTER
    try:
        return float(SECONDS(text))
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"$FORUM_FORGET_AFTER: {exc}") from None


async def _make_worker(
    stack: contextlib.AsyncExitStack,
    args: argparse.Namespace,
    code: UserCode,
    space: ClusterClient,
    lens: Lens,
    *,
    owner: str,
) -> Worker:
    """The app's worker, or the handler's (opened on ``stack``)."""
    options: dict[str, Any] = {
        "concurrency": args.concurrency,
        "lease": args.lease,
        "owner": owner,
        "drain_timeout": args.drain_timeout,
        "take_wait": args.take_wait,
    }
    if args.max_attempts is not None:
        options["max_attempts"] = args.max_attempts
    try:
        if code.app is not None:
            if args.executor is not None:
                options["executor"] = args.executor
            return code.app.worker(space, lens, queues=args.queues, **options)
        handler = await stack.enter_async_context(open_handler(args.handler, code.handler))
        backoff = 1.0 if args.backoff is None else args.backoff
        return Worker(
            space,
            lens,
            Pattern(os.fsencode(args.prefix)),
            handler,
            backoff=Backoff(base=backoff, cap=max(backoff, 300.0)),
            key=code.key,
            dead_prefix=os.fsencode(args.dead_prefix or DEFAULT_DEAD_PREFIX.decode()),
            **options,
        )
    except (ValueError, TaskError) as exc:
        raise UsageError(str(exc)) from None


def _queues(text: str) -> dict[str, int]:
    """``--queues``'s value: names and weights (:func:`forum.tasks.queues.parse_weights`)."""
    try:
        return parse_weights(text)
    except TaskError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _check_max_attempts(app: App, given: int | None) -> None:
    """An app's worker buries a job past ``--max-attempts`` deliveries, so it
    must allow every attempt of the task with the most retries."""
    if given is None:
        return
    task = max(app.tasks.values(), key=lambda t: t.options.retries)
    if given < task.options.retries + 1:
        raise UsageError(
            f"--max-attempts {given}: below task {task.name!r}'s {task.options.retries + 1} "
            "attempts (its retries + 1)"
        )


async def check_lens(lens: Lens, url: str, *, required: bool) -> None:
    """Fail now if Redis refuses this URL (a database that does not exist, a
    wrong password), or, when ``required``, does not answer. Otherwise Redis
    merely down, full, read-only or without a master is an outage, not a
    mistake: the worker starts and fails closed until the Lens serves again."""
    try:
        await lens.ping()
    except LensUnavailable as exc:
        if exc.misconfigured:  # a wrong password, or an ACL that forbids the Lens
            raise UsageError(f"--redis-url {masked(url)}: {exc.__cause__ or exc}") from None
        if required and exc.reason == "unreachable":
            raise UsageError(f"--redis-url {masked(url)}: Redis is not reachable: {exc}") from None
        # Full, read-only, without a master: there, but not serving the Lens now.
        log.warning("the Lens is unavailable (%s: %s): waiting for it", exc.reason, exc)
    except LensError as exc:
        raise UsageError(f"--redis-url {masked(url)}: {exc.__cause__ or exc}") from None


async def _warn_durability(lens: Lens) -> None:
    """Say, loudly, how this Redis falls short of what the guarantees rest on."""
    try:
        shortfalls = await lens.durability()
    except LensError as exc:  # down: check_lens said so already
        log.debug("Redis's durability settings not checked: %s", exc)
        return
    for line in shortfalls:
        print(f"forum worker: WARNING: {line}", file=sys.stderr, flush=True)
    if shortfalls:
        see = "docs/coordination.md, 'Redis settings the guarantees need'"
        print(f"forum worker: WARNING: see {see}", file=sys.stderr, flush=True)


async def _check_node(space: ClusterClient) -> None:
    """Fail now if the node refuses the token; a node that is down is waited for."""
    try:
        await space.status()
    except Unauthorized as exc:
        raise UsageError(f"--token: {exc}") from None
    except ClientError as exc:
        log.warning("the node is not reachable yet (%s): waiting for it", exc)


async def _serve_metrics(
    stack: contextlib.AsyncExitStack, worker: Worker, host: str, port: int
) -> None:
    try:
        runner = await stack.enter_async_context(
            serve_metrics(
                worker_registry(worker.stats, getattr(worker, "task_times", None)), host, port
            )
        )
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageError(
            f"--metrics-port {port}: cannot listen on {host}:{port}: {reason}"
        ) from None
    if port == 0:
        bound = ", ".join(f"{a[0]}:{a[1]}" for a in runner.addresses)
        print(f"forum worker: metrics on {bound}", file=sys.stderr, flush=True)


def progress_line(owner: str, stats: WorkerStats) -> str:
    why = stats.lens_unavailable_reason or "unavailable"
    redis = "up" if stats.lens_reachable else f"DOWN ({why}; failing closed)"
    return (
        f"{owner}: done {stats.done}  retried {stats.retried}  dead {stats.dead}  "
        f"double takes {stats.double_takes}  claims lost {stats.claims_lost}  "
        f"running {stats.running}  redis {redis}  "
        f"state losses {stats.lens_state_losses}"
    )


async def _progress(worker: Worker, done: asyncio.Event) -> None:
    """A live progress line: redrawn in place on a terminal, a log line otherwise."""
    tty = sys.stderr.isatty()
    interval = _PROGRESS_TTY if tty else _PROGRESS_LOG
    while not done.is_set():
        await wait_event(done, interval)
        line = progress_line(worker.owner, worker.stats())
        print(f"\r\x1b[K{line}" if tty else line, end="" if tty else "\n", file=sys.stderr)
    if tty:
        print(file=sys.stderr)
