"""When compaction runs: in the background, once enough of the Strand is dead.

Every ``interval`` seconds the compactor looks at the Strand: when at least
``dead_ratio`` of its entries are dead (stored, but neither live nor
reserved) and the horizon has moved since the last pass (a pass under the
same horizon would find nothing new to drop), it runs one pass of
:meth:`forum.node.space.forum.Forum.compact`. Only sealed segments are rewritten in the
background, and the current segment is sealed first (so that its dead
entries can go too) only once it holds an eighth of ``segment_bytes``: a
pass every ``interval`` must not leave a trail of tiny segments behind.
``POST /v1/compact`` always seals it first.

After a pass that dropped entries, the memory it held for a moment is given
back to the operating system (:mod:`forum.node.space.allocator`), so the node's RSS
follows its backlog, not its largest pass.

The horizon comes from ``horizon()``: replication's per-origin minimum of
the members' vectors; without replication the node's own vector (a node
alone is the whole cluster).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from forum.node.core.errors import StrandError
from forum.node.core.reports import CompactionReport
from forum.node.core.resource import AsyncResource
from forum.node.space.allocator import give_back
from forum.node.space.forum import Forum

log = logging.getLogger(__name__)

Horizon = Callable[[], Mapping[str, int]]
#: The background pass seals the current segment once it is this share full.
_SEAL_SHARE = 8


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """When the background compactor runs (``NodeConfig.compact_*``)."""

    #: Seconds between two looks at the Strand; 0 turns background compaction off.
    interval: float = 10.0
    #: The share of stored entries that must be dead for a pass to run.
    dead_ratio: float = 0.5

    def __post_init__(self) -> None:
        if not self.interval >= 0:
            raise ValueError("compact_interval must be at least 0")
        if not 0 <= self.dead_ratio <= 1:
            raise ValueError("compact_dead_ratio must be between 0 and 1")


class Compactor(AsyncResource):
    """Runs compaction passes for one Forum, in the background and on demand."""

    def __init__(
        self, forum: Forum, policy: CompactionPolicy, horizon: Horizon | None = None
    ) -> None:
        self._forum = forum
        self._policy = policy
        self._horizon = horizon or forum.strand.vector
        self._last_horizon: dict[str, int] | None = None
        self._task: asyncio.Task[None] | None = None
        self.last: CompactionReport | None = None

    def set_horizon(self, horizon: Horizon) -> None:
        """Where the horizon comes from (replication sets it when it starts)."""
        self._horizon = horizon

    def horizon(self) -> dict[str, int]:
        return dict(self._horizon())

    def start(self) -> None:
        if self._policy.interval and self._task is None:
            self._task = asyncio.create_task(self._run(), name="compactor")

    async def compact_now(self) -> CompactionReport:
        """One pass now, the current segment sealed first (``POST /v1/compact``)."""
        return await self._pass(seal=True)

    def dead_share(self) -> float:
        stats = self._forum.stats()
        if not stats.entries:
            return 0.0
        return max(0, stats.entries - stats.live - stats.reserved) / stats.entries

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._policy.interval)
            if self.dead_share() < self._policy.dead_ratio or self.horizon() == self._last_horizon:
                continue
            strand = self._forum.strand
            seal = strand.current_segment_bytes >= strand.config.segment_bytes // _SEAL_SHARE
            try:
                await self._pass(seal=seal)
            except StrandError as exc:  # a disk fault: the Strand says which
                log.warning("compaction: a pass failed: %s; the next is in %ss", exc,
                            self._policy.interval)  # fmt: skip
            except Exception:  # a bug: say so, and keep the loop (appends go on)
                log.exception("compaction: a pass failed")

    async def _pass(self, *, seal: bool) -> CompactionReport:
        horizon = self.horizon()
        report = await self._forum.compact(horizon, seal=seal)
        self._last_horizon = horizon
        self.last = report
        if report.entries_dropped:
            # What the pass held for a moment goes back to the OS, not to
            # the allocator's arenas for ever (forum.node.space.allocator).
            await asyncio.to_thread(give_back)
            log.info(
                "compaction: dropped %d entries, %d -> %d bytes in %.2fs",
                report.entries_dropped,
                report.bytes_before,
                report.bytes_after,
                report.seconds,
            )
        return report

    async def aclose(self) -> None:
        """Stop the background loop; a pass under way is cancelled between two
        steps (each step is crash-safe, so a cancelled pass is as a crash)."""
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
