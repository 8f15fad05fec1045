"""Every error the ``coordinator`` package raises, under one root.

::

    LensError                       anything the Lens raises on purpose
    ├── AlreadyClaimed              another holder's claim on the key is live
    ├── AlreadyDone                 the key was completed before (done marker)
    ├── ClaimLost                   this claim no longer holds its key: expired,
    │                               released, completed, or taken over
    └── LensUnavailable             Redis unreachable, timing out, loading or
                                    read-only (also a ConnectionError; retriable)

``retriable`` tells a caller whether doing the same thing again may succeed.
``AlreadyClaimed`` and ``AlreadyDone`` after a take are the Lens catching a
double take: the caller must not run the job. ``ClaimLost`` means a stale
holder: it must not do the irreversible step it was about to do.
"""

from __future__ import annotations


class LensError(Exception):
    """Root of every error raised by the coordinator on purpose."""

    retriable: bool = False


class AlreadyClaimed(LensError):
    """Another holder's claim on ``key`` is live.

    ``owner`` names the holder when the Lens knows it (``None`` otherwise).
    """

    def __init__(self, key: str, owner: str | None) -> None:
        holder = f" by {owner}" if owner else ""
        super().__init__(f"{key!r} is claimed{holder}")
        self.key = key
        self.owner = owner


class AlreadyDone(LensError):
    """``key`` was completed before; ``token`` is the fencing token that completed it."""

    def __init__(self, key: str, token: int) -> None:
        super().__init__(f"{key!r} was completed with token {token}")
        self.key = key
        self.token = token


class ClaimLost(LensError):
    """This claim (``key``, ``token``) no longer holds its key; ``reason`` says why."""

    def __init__(self, key: str, token: int, reason: str) -> None:
        super().__init__(f"claim on {key!r} with token {token} lost: {reason}")
        self.key = key
        self.token = token
        self.reason = reason


class LensUnavailable(LensError, ConnectionError):
    """Redis could not be reached or did not answer in time.

    The outcome of the operation is unknown: a claim may have been granted, a
    completion recorded. Every Lens operation is safe to repeat, so retrying is
    the answer; until it succeeds, fail closed (do no irreversible work).
    """

    retriable = True
