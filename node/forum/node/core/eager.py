"""Running a coroutine's first step at once, with no task unless it waits.

Most of what the stream does per request never waits: a reserve or a count
is answered in its first step, and a WebSocket write returns at once unless
the socket's buffer is full. Wrapping each in a task costs a task and a turn
of the loop for nothing; :func:`start` runs the first step by hand instead::

    outcome = start(socket.send_bytes(frame))
    if isinstance(outcome, Suspended):  # it waits: go on, in this task or another
        await outcome

Python 3.12's ``eager_start`` tasks do this too; the node also runs on 3.11.
The first step runs in the caller's task (``asyncio.current_task()`` is the
caller's), so only start this way what does not bind itself to its task in
that step (``asyncio.timeout`` does: a long poll starts as a task of its own).
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

_T = TypeVar("_T")


class Suspended(Generic[_T]):
    """The rest of a coroutine whose first step waits on ``step`` (a future);
    awaiting it (once) goes on with the coroutine to its end."""

    __slots__ = ("_coroutine", "_step")

    def __init__(self, coroutine: Coroutine[Any, Any, _T], step: Any) -> None:
        self._coroutine = coroutine
        self._step = step

    def __await__(self) -> Generator[Any, Any, _T]:
        # Each yield hands the awaiting task what the coroutine waits on, and
        # passes back what the task sends or throws once that is done.
        coroutine, step = self._coroutine, self._step
        while True:
            try:
                sent = yield step
            except BaseException as exc:  # cancelled, or closed: the coroutine's to handle
                try:
                    step = coroutine.throw(exc)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            else:
                try:
                    step = coroutine.send(sent)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]

    async def finish(self) -> _T:
        """The rest as a coroutine (for ``create_task``)."""
        return await self


def start(coroutine: Coroutine[Any, Any, _T]) -> _T | Suspended[_T]:
    """Run ``coroutine`` up to where it first waits: its result if it ends
    there (or its exception, raised), else the :class:`Suspended` rest."""
    try:
        step = coroutine.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    return Suspended(coroutine, step)
