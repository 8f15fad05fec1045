"""Waits and calls that a task's cancellation always ends, on Python 3.11 too.

On 3.11, ``asyncio.wait_for(inner, timeout)`` returns ``inner``'s result when
the waiting task is cancelled in the moment ``inner`` finishes: the
cancellation is lost (CPython gh-86296; 3.12 rebuilt ``wait_for`` on
``asyncio.timeout`` and fixed it). The task goes on as if never cancelled,
and a loop that a ``TaskGroup`` or a shutdown cancels runs for ever::

    t0  a worker's reaper awaits a Lens call; redis-py sends the command
        under wait_for(send, socket_timeout)
    t1  the send finishes; in the same turn of the loop the TaskGroup
        cancels the reaper
    t2  wait_for sees its inner send done and returns normally: the reaper
        reads the reply and sleeps for its next pass, for ever; the worker's
        run() never ends (found in the suite, under load)

Two helpers, one per way in:

* :func:`wait_event` waits on an event with a timeout without ``wait_for``
  (``asyncio.timeout`` keeps the count right on 3.11): every wait of our own.
* :func:`keep_cancellation` awaits a third party's call that may lose a
  cancellation this way (redis-py's every command) and raises it after all:
  the task still counts the request (``Task.cancelling()``), so a call that
  returns normally with more requests than it started with was cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["gather_all", "keep_cancellation", "wait_event"]

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set, for at most ``timeout`` seconds (``None``:
    no limit); whether it is set. A cancellation of the waiting task always
    propagates (not ``asyncio.wait_for(event.wait(), timeout)``: see above)."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()


async def keep_cancellation(call: Awaitable[T]) -> T:
    """``await call``; if the task was cancelled meanwhile and ``call``
    returned anyway, raise the cancellation (its effect may have happened,
    as when a cancellation lands just after a reply)."""
    task = asyncio.current_task()
    requested = task.cancelling() if task is not None else 0
    result = await call
    if task is not None and task.cancelling() > requested:
        raise asyncio.CancelledError
    return result


async def gather_all(*calls: Awaitable[T]) -> list[T]:
    """Run ``calls`` together, each to its end; their results in order, or,
    once every one has ended, the first one's error (in order). A plain
    ``asyncio.gather`` raises at the first error and leaves the others
    running, behind a caller that may be closing what they use (a client's
    sessions: one then reached the garbage collector unclosed)."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    done: list[T] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        done.append(result)
    return done
