"""The history checker: did a work-queue run keep its promises?

It reads what happened in a run, as sets and counts of job names, and
judges it by the total-queue semantics of Jepsen's ``total-queue`` checker,
plus one rule of Forum's own, about effects:

``lost``
    acknowledged writes that were never done (must be 0);
``unexpected``
    jobs done that were never written (must be 0);
``recovered``
    jobs whose write was not acknowledged (the producer saw an error or a
    timeout) but which were done anyway: allowed, an ambiguous write landed;
``duplicate_deliveries``
    extra times a handler was started for a job already started (allowed:
    a double take, a re-offer after a lost lease, a retry);
``reruns``
    times a job ran again under the same claim after the holder that applied
    its effect died before completing (allowed: at-least-once; the effect
    store saw the same claim key and did not apply it twice);
``duplicate_effects``
    extra times a job's irreversible effect was applied under another claim
    (must be 0: that is what the Lens and the fencing tokens are for).

A job counts as *done* when its effect was applied at least once.

Reruns after Redis lost the Lens's state (a ``FLUSHALL``, a restart without
persistence) are counted as ``reruns``, not as duplicate effects. What the
sink (:mod:`forum.deploy.sink`, in a Redis database of its own, so a flush of the
Lens's database leaves it) sees of one:

* the job runs again under the *same claim key*: the key is the first
  delivery's entry id or the trailer's key, which the node's copy carries,
  not the Lens; and with a *higher token*: the Lens's tokens are clock-based,
  above every token granted before the loss. The sink finds the key it
  holds and does not apply the effect again: a rerun;
* a holder from before the loss that writes late, after a newer holder,
  has the lower token: refused (``StaleToken``), not counted at all;
* an application under a *different* claim key is a separate application
  of the job: a ``duplicate_effect``, and the run fails, loss or no loss.

What this does not tell apart: two holders of one claim key that were both
live at once across a loss (the old one before its heartbeat met the loss,
and a new one) look like an effect and a rerun. The workers' pause of one
lease after a loss is what keeps them apart; the sink counts their effects
once either way (it is keyed by claim key, as a fenced store is), but the
checker does not verify the pause.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class History:
    """What a run did, recorded by job name (the job's payload, as text)."""

    attempted: set[str] = field(default_factory=set)
    acknowledged: set[str] = field(default_factory=set)
    deliveries: Counter[str] = field(default_factory=Counter)
    effects: Counter[str] = field(default_factory=Counter)
    reruns: Counter[str] = field(default_factory=Counter)

    def wrote(self, job: str, acknowledged: bool) -> None:
        self.attempted.add(job)
        if acknowledged:
            self.acknowledged.add(job)

    def delivered(self, jobs: Iterable[str]) -> None:
        self.deliveries.update(jobs)

    def applied(self, jobs: Iterable[str]) -> None:
        self.effects.update(jobs)

    def check(self) -> Verdict:
        return check(self)


@dataclass(frozen=True, slots=True)
class Verdict:
    attempted: int
    acknowledged: int
    done: int
    lost: tuple[str, ...]
    unexpected: tuple[str, ...]
    recovered: int
    duplicate_deliveries: int
    reruns: int
    duplicate_effects: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return not (self.lost or self.unexpected or self.duplicate_effects)

    def summary(self) -> str:
        """One line for people, the same for every run so runs can be compared."""
        return (
            f"{'OK' if self.valid else 'FAILED'}: attempted={self.attempted} "
            f"acknowledged={self.acknowledged} done={self.done} lost={len(self.lost)} "
            f"unexpected={len(self.unexpected)} recovered={self.recovered} "
            f"duplicate_deliveries={self.duplicate_deliveries} reruns={self.reruns} "
            f"duplicate_effects={len(self.duplicate_effects)}"
        )

    def explain(self, limit: int = 10) -> str:
        """The summary, plus a few of the offending job names."""
        lines = [self.summary()]
        for name in ("lost", "unexpected", "duplicate_effects"):
            jobs: tuple[str, ...] = getattr(self, name)
            if jobs:
                lines.append(f"  {name}: {', '.join(jobs[:limit])}")
        return "\n".join(lines)


def check(history: History) -> Verdict:
    done = {job for job, n in history.effects.items() if n > 0}
    return Verdict(
        attempted=len(history.attempted),
        acknowledged=len(history.acknowledged),
        done=len(done),
        lost=tuple(sorted(history.acknowledged - done)),
        unexpected=tuple(sorted(done - history.attempted)),
        recovered=len((history.attempted - history.acknowledged) & done),
        duplicate_deliveries=sum(n - 1 for n in history.deliveries.values() if n > 1),
        reruns=sum(history.reruns.values()),
        duplicate_effects=tuple(sorted(job for job, n in history.effects.items() if n > 1)),
    )
