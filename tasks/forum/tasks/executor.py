"""Sync tasks in processes: :class:`ProcessPool`, the ``"process"`` executor.

::

    @app.task(executor="process", soft_timeout=50, timeout=60)
    def render(ctx, scene_id):
        try:
            return heavy(scene_id)          # at 50 s: SoftTimeout raised here
        except SoftTimeout:
            return partial_result()         # at 60 s: the process is SIGKILLed

A thread cannot be stopped from outside, so a sync task under the default
``"thread"`` executor runs on past its timeout. Under ``"process"`` (per
task, or for a whole worker: ``App.worker(executor="process")``, ``forum
worker --executor process``) each attempt runs in one of the worker's
``concurrency`` processes:

* at ``soft_timeout`` the task gets :class:`forum.tasks.SoftTimeout` (a
  ``SIGALRM`` in the child's main thread), which it may catch;
* at ``timeout`` (the hard limit), or when the attempt is stopped (its job
  cancelled, its claim lost, the drain over), its process is killed
  (``SIGKILL``) and a fresh one started for the next attempt that needs
  one; a timed-out attempt fails with ``TimeoutError`` and is retried as
  the task's policy says. The killed holder's late effects are fenced like
  any stale holder's: its claim was released (or retired by the cancel), so
  its token is refused.

**How the child finds the task.** Processes are started with ``spawn`` (no
copy of the worker's threads, sockets or event loop), and a task is sent by
its function's module and qualified name, which the child imports (the
function a ``@app.task`` replaced is the :class:`forum.tasks.Task`'s). So a
process task is a function at the top level of an importable module (the
app's module, as ``forum worker --app module:app`` names it): one defined
inside another function is refused when the task is defined (or, under a
worker-wide ``"process"``, when the worker is made). Its arguments and its
result cross in pickles (what the app's serializer decoded; a result that
does not pickle fails the attempt).

**The context in a child** (:class:`ProcessContext`): ``job_id``, ``key``,
``task``, ``attempt`` and ``token`` as in a thread; ``verify_sync()`` asks
the worker, which asks the Lens (``ClaimLost`` comes back into the task);
``progress(value)`` is sent to the worker, which records it as a thread's
would (fire and forget). ``await ctx.verify()`` is not there: the task is
sync.

A child whose worker died (SIGKILL) finds its pipe closed and exits once
its task returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import copyreg
import importlib
import logging
import multiprocessing
import pickle
import signal
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from forum.coordinator import ClaimLost, LensError, RetryAfter
from forum.tasks.errors import InvalidJob, JobCancelled, SoftTimeout, TaskError
from forum.tasks.task import EXECUTORS, Task, TaskOptions, check_importable

if TYPE_CHECKING:
    from forum.tasks.context import Context

log = logging.getLogger(__name__)

#: How a child is started: a fresh interpreter, nothing of the worker's copied.
_START = multiprocessing.get_context("spawn")

# The errors that cross the pipe and whose constructors take more than their
# message: pickled by their fields, in both processes (each imports this module).
copyreg.pickle(ClaimLost, lambda e: (ClaimLost, (e.key, e.token, e.reason)))
copyreg.pickle(RetryAfter, lambda e: (RetryAfter, (e.delay, e.error)))
copyreg.pickle(JobCancelled, lambda e: (JobCancelled, (e.key,)))


def process_pool(tasks: Iterable[Task], executor: str, size: int) -> ProcessPool | None:
    """The pool of ``size`` processes for the sync tasks of ``tasks`` that run
    in one (their own executor, else the worker's ``executor``); ``None``
    when none does. ``InvalidJob`` for a bad ``executor``, a task a child
    cannot import, or a soft timeout a thread would get."""
    if executor not in EXECUTORS:
        raise InvalidJob(f"executor must be 'thread' or 'process', not {executor!r}")
    pool = ProcessPool(size, executor)
    inside = False
    for task in tasks:
        if task.is_async:
            continue
        if pool.runs(task):
            check_importable(task.name, task.function)
            inside = True
        elif task.options.soft_timeout is not None:
            raise InvalidJob(
                f"task {task.name!r} has a soft_timeout and runs in a thread: give it "
                "executor='process', or the worker executor='process'"
            )
    return pool if inside else None


@dataclass(frozen=True, slots=True)
class _Call:
    """One attempt, as sent to a child."""

    module: str
    qualname: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    soft_timeout: float | None
    job_id: str
    key: str
    task: str
    attempt: int
    token: int


class ProcessPool:
    """Up to ``size`` child processes running sync tasks, one attempt each at
    a time (the worker runs at most ``concurrency`` jobs: ``size``). A child
    is started when an attempt needs one and none is idle, and kept for the
    next; one killed (a hard timeout, a stopped attempt) or dead is replaced
    so. ``default`` is the worker's executor, for tasks that name none."""

    def __init__(self, size: int, default: str = "thread") -> None:
        self._default = default
        self._idle: list[_Child] = []
        self._busy: set[_Child] = set()
        #: One thread per running attempt, to carry its exchange with its child.
        self._threads = ThreadPoolExecutor(size, thread_name_prefix="task-process")
        #: Children killed or replaced so far (a test's and an operator's count).
        self.replaced = 0

    def runs(self, task: Task) -> bool:
        """Whether ``task`` runs in a process of this pool."""
        return not task.is_async and (task.options.executor or self._default) == "process"

    async def run(
        self, task: Task, options: TaskOptions, context: Context, args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> Any:  # fmt: skip
        """One attempt of ``task`` in a child: its return value, or what it
        raised; ``TimeoutError`` once ``options.timeout`` passed (the child
        killed). A cancelled caller kills the child too."""
        function = task.function
        call = _Call(
            function.__module__, function.__qualname__, tuple(args), dict(kwargs),
            options.soft_timeout,
            context.job_id, context.key, context.task, context.attempt, context.token,
        )  # fmt: skip
        child = self._idle.pop() if self._idle else await self._start()
        self._busy.add(child)
        loop = asyncio.get_running_loop()
        started = loop.create_future()
        exchange = loop.run_in_executor(self._threads, child.exchange, call, context, started)
        try:
            # The limit counts from the task's start in its child, past the
            # child's first import of the task's module.
            await asyncio.wait((exchange, started), return_when=asyncio.FIRST_COMPLETED)
            async with asyncio.timeout(options.timeout):
                await asyncio.wait((exchange,))
            reply = exchange.result()
        except (EOFError, OSError) as exc:  # TimeoutError is an OSError: the limit's
            await self._replace(child, exchange)
            if isinstance(exc, TimeoutError):
                why = (
                    f"the task ran past its timeout of {options.timeout:g}s: its process was killed"
                )
                raise TimeoutError(why) from None
            raise RuntimeError(
                f"the task's process died (exit code {child.process.exitcode})"
            ) from None
        except BaseException:
            # Cancelled (the attempt stopped), or a call or result that would
            # not cross the pipe: the child goes, a fresh one comes.
            await self._replace(child, exchange)
            raise
        finally:
            started.cancel()
        self._busy.discard(child)
        self._idle.append(child)
        return _outcome(reply)

    async def _start(self) -> _Child:
        """A new child. One whose start outlives a cancelled caller is kept idle."""
        starting = asyncio.ensure_future(asyncio.to_thread(_Child))
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:
            starting.add_done_callback(self._keep_idle)
            raise

    def _keep_idle(self, started: asyncio.Future[_Child]) -> None:
        if not started.cancelled() and started.exception() is None:
            self._idle.append(started.result())

    async def _replace(self, child: _Child, exchange: asyncio.Future[Any]) -> None:
        """Kill ``child`` (its exchange then ends on the closed pipe) and
        forget it: the next attempt starts another."""
        self._busy.discard(child)
        self.replaced += 1
        child.process.kill()
        await asyncio.wait((exchange,))
        if not exchange.cancelled():
            exchange.exception()  # EOFError, as expected: retrieved, so not logged
        await asyncio.to_thread(child.close)

    async def aclose(self) -> None:
        """Stop every child (the worker is drained: none runs an attempt)."""
        children = [*self._idle, *self._busy]
        self._idle.clear()
        for child in children:
            child.process.kill()
            await asyncio.to_thread(child.close)
        self._threads.shutdown(wait=False, cancel_futures=True)


class _Child:
    """One child process and the worker's end of its pipe."""

    def __init__(self) -> None:
        ours, theirs = _START.Pipe()
        self.process = _START.Process(
            target=child_main, args=(theirs,), name="forum-task", daemon=True
        )
        self.process.start()
        theirs.close()  # so a dead child is an EOF here
        self.conn = ours

    def exchange(
        self, call: _Call, context: Context, started: asyncio.Future[None]
    ) -> tuple[Any, ...]:
        """Send ``call`` and serve the child's requests until its outcome
        (in a thread of the pool: the pipe blocks), setting ``started`` when
        the child starts the task. ``EOFError`` once the child is dead."""
        self.conn.send(call)
        while True:
            message = self.conn.recv()
            if message[0] == "started":
                loop = started.get_loop()
                loop.call_soon_threadsafe(_set, started)
            elif message[0] == "verify":
                self.conn.send(_verified(context, message[1]))
            elif message[0] == "progress":
                _progress(context, message[1])
            else:
                return tuple(message)

    def close(self) -> None:
        self.process.join()
        self.conn.close()


def _set(started: asyncio.Future[None]) -> None:
    if not started.done():
        started.set_result(None)


def _verified(context: Context, timeout: float) -> tuple[str, BaseException | None]:
    """The answer to a child's ``verify_sync()``: the error to raise in it, if any."""
    try:
        context.verify_sync(timeout)
    except (LensError, TaskError, TimeoutError) as exc:
        return ("raise", _portable(exc))
    return ("ok", None)


def _progress(context: Context, value: Any) -> None:
    try:
        context.progress(value)
    except JobCancelled:
        pass  # the attempt is over: its child is being killed
    except Exception as exc:  # the serializer's refusal: a child's cannot be raised back
        log.warning("%s: progress not recorded (%s)", context.key, exc)


def _outcome(reply: tuple[Any, ...]) -> Any:
    """A child's outcome: its result, or the error it raised (with the
    child's traceback as its cause)."""
    if reply[0] == "result":
        return reply[1]
    error: BaseException = reply[1]
    error.__cause__ = ChildTraceback(reply[2])
    raise error


class ChildTraceback(Exception):
    """The traceback of an error a task raised in its child process (the
    cause of the error raised in the worker, as multiprocessing's pools do)."""

    def __init__(self, text: str) -> None:
        super().__init__(f"\n\n[in the task's process]\n{text}")


# -- the child's side -------------------------------------------------------------------


@dataclass(slots=True)
class ProcessContext:
    """What a task run in a child process is given (see the module docstring)."""

    job_id: str
    key: str
    task: str
    attempt: int
    token: int
    _conn: Connection = field(repr=False)

    def verify_sync(self, timeout: float = 10.0) -> None:
        """Raise ``ClaimLost`` unless this job's claim is still live (the
        worker asks the Lens)."""
        with _alarm_held():  # a soft timeout must not cut the exchange in two
            self._conn.send(("verify", timeout))
            kind, error = self._conn.recv()
        if kind == "raise":
            raise error

    def progress(self, value: Any) -> None:
        """Record ``value`` as this job's progress, through the worker."""
        with _alarm_held():
            self._conn.send(("progress", value))


def child_main(conn: Connection) -> None:
    """A child's life: run each call sent until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the worker's
    functions: dict[tuple[str, str], Callable[..., Any]] = {}
    while True:
        try:
            call = conn.recv()
        except EOFError:
            return
        conn.send_bytes(_attempt(call, conn, functions))


def _attempt(
    call: _Call, conn: Connection, functions: dict[tuple[str, str], Callable[..., Any]]
) -> bytes:
    """One call's outcome, pickled: ``("result", value)`` or ``("error",
    exception, traceback)``."""
    try:
        where = (call.module, call.qualname)
        function = functions.get(where) or functions.setdefault(where, _resolve(*where))
        context = ProcessContext(call.job_id, call.key, call.task, call.attempt, call.token, conn)
        conn.send(("started",))
        with _soft_limit(call.soft_timeout):
            value = function(context, *call.args, **call.kwargs)
        return pickle.dumps(("result", value))
    except Exception as exc:
        return pickle.dumps(("error", _portable(exc), "".join(traceback.format_exception(exc))))


def _resolve(module: str, qualname: str) -> Callable[..., Any]:
    """The function a task names: the module's object by that name (the
    :class:`Task` a decorator left there gives its function)."""
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    function: Callable[..., Any] = found.function if isinstance(found, Task) else found
    return function


def _portable(exc: Exception) -> Exception:
    """``exc`` if it survives a pickle (into the other process), else a
    ``RuntimeError`` saying what it was."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


@contextlib.contextmanager
def _soft_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`SoftTimeout` in this (main) thread ``seconds`` from now."""
    if seconds is None:
        yield
        return

    def expired(signum: int, frame: object) -> None:
        raise SoftTimeout(seconds)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _alarm_held() -> Iterator[None]:
    """Hold ``SIGALRM`` back for the body (it is delivered after)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
