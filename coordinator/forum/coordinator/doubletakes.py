"""The double takes a worker catches, logged without swamping the log.

A double take caught at the claim (``AlreadyDone``, ``AlreadyClaimed``: a
copy of a job done or running elsewhere, see forum.coordinator.worker) is
expected wherever several nodes hand out the same jobs: it is counted (the
worker's ``double_takes``, ``forum_worker_jobs_total{outcome="double_takes"}``),
logged at DEBUG one by one, and at INFO as one summary line at most every
:data:`SUMMARY_INTERVAL` seconds, when any were caught: how many since the
last summary, and the pattern the worker serves.

No task of its own: the summary is due-checked at each catch and at each
of the worker's heartbeats (:meth:`DoubleTakes.summarize`), so it is at most
a beat late. Nothing is owed at a stop: the counts are in the worker's stats.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from forum.node.core.entries import EntryId

log = logging.getLogger(__name__)

#: The fewest seconds between two summary lines.
SUMMARY_INTERVAL = 60.0


class DoubleTakes:
    """The double takes caught since the last summary line (see the module
    docstring); ``clock`` is monotonic seconds."""

    __slots__ = ("_clock", "_last", "_pattern", "since")

    def __init__(self, pattern: bytes, clock: Callable[[], float] = time.monotonic) -> None:
        self._pattern = pattern.decode(errors="backslashreplace")
        self._clock = clock
        self._last = clock()
        #: Caught since the last summary.
        self.since = 0

    def caught(self, entry_id: EntryId, outcome: Exception) -> None:
        """One double take caught: at DEBUG, and in the next summary."""
        log.debug("double take of %s caught, not run: %s", entry_id, outcome)
        self.since += 1
        self.summarize()

    def summarize(self) -> None:
        """The summary line, if one is due and any were caught since the last."""
        now = self._clock()
        if self.since and now - self._last >= SUMMARY_INTERVAL:
            log.info(
                "%d double takes of %s caught in the last %.0f s, not run (copies of jobs "
                "done or running elsewhere)",
                self.since,
                self._pattern,
                now - self._last,
            )
            self.since = 0
            self._last = now
