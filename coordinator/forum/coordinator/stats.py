"""What a worker counts, and its state now (:class:`WorkerStats`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class WorkerStats:
    """Counts since the worker started, and its state now.

    ``Worker.stats()`` gives a copy; the worker adds to its own (whose state
    fields it fills in only in the copies)."""

    taken: int = 0
    done: int = 0
    retried: int = 0
    dead: int = 0
    double_takes: int = 0
    claims_lost: int = 0
    lens_unavailable: int = 0
    handed_back: int = 0
    reoffered: int = 0
    #: Retries reserved before they were due (by their trailers, or by the
    #: Lens: ``NotDue``), put off on the node until then.
    deferred: int = 0
    #: Jobs over a limit, put off on the node without a claim (forum.coordinator.limits).
    over_limit: int = 0
    #: Jobs whose claims Redis forgot while they ran, put back by this worker.
    rescued: int = 0
    #: Times Redis was found to have lost the Lens's state (each loss once).
    lens_state_losses: int = 0
    running: int = 0
    #: False while the Lens is unavailable, or in the pause after a state
    #: loss: either way the worker claims nothing.
    lens_reachable: bool = True
    #: Why the Lens is unavailable now (a word of forum.coordinator.errors.UNAVAILABLE),
    #: ``"paused"`` in the pause after a state loss; ``None`` while it serves.
    lens_unavailable_reason: str | None = None
