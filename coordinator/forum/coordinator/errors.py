"""Every error the ``coordinator`` package raises, under one root.

::

    LensError                       anything the Lens raises on purpose
    ├── AlreadyClaimed              another holder's claim on the key is live
    ├── AlreadyDone                 the key was completed before (done marker)
    ├── NotDue                      an attempt of the key's job failed and the
    │                               next is not due yet (its backoff)
    ├── AttemptsSpent               the key's job was buried as a dead letter:
    │                               no more attempts
    ├── ClaimLost                   this claim no longer holds its key: expired,
    │                               released, completed, or taken over
    └── LensUnavailable             Redis unreachable, timing out, loading,
        │                           read-only, full or refusing the Lens (also
        │                           a ConnectionError; retriable); ``reason``
        │                           says which, in one word of UNAVAILABLE
        └── LensStateLost           Redis forgot the Lens's keys (flushed, restarted
                                    without persistence): the epoch marker is gone
                                    or changed; raised once per loss, per Lens

``retriable`` tells a caller whether doing the same thing again may succeed.
``AlreadyClaimed``, ``AlreadyDone``, ``NotDue`` and ``AttemptsSpent`` after
a take are the Lens catching a copy of a job that must not run now: the
caller must not run it (``NotDue``: not before ``remaining`` seconds). ``ClaimLost`` means a stale
holder: it must not do the irreversible step it was about to do.
``LensStateLost`` is a ``LensUnavailable`` so that callers fail closed on it
as they do on an outage; the Lens works again on its next call.
"""

from __future__ import annotations

from typing import Literal, get_args

#: Why the Lens is unavailable, as :attr:`LensUnavailable.reason` says (and
#: the worker's metrics label it):
#:
#: * ``full``: Redis is out of memory (``maxmemory`` with ``noeviction``
#:   refuses writes: ``OOM``);
#: * ``read-only``: the server is a replica (``READONLY``, after a failover) or
#:   refuses writes for its own reasons (``MISCONF``: a failed snapshot);
#: * ``replicas behind``: too few replicas took the writes (``NOREPLICAS``, a
#:   short ``WAIT``/``WAITAOF``);
#: * ``master down``: the shard has no master now (``MASTERDOWN``,
#:   ``CLUSTERDOWN``, ``TRYAGAIN``);
#: * ``loading``: the server is replaying its AOF (``LOADING``);
#: * ``busy``: a script runs past its time (``BUSY``);
#: * ``refused``: the server refuses the credentials or the commands
#:   (``NOAUTH``, ``WRONGPASS``, ``NOPERM``);
#: * ``unreachable``: no connection, or no answer in time;
#: * ``state lost``: Redis forgot the Lens's keys (:class:`LensStateLost`).
UnavailableReason = Literal[
    "full", "read-only", "replicas behind", "master down", "loading", "busy", "refused",
    "unreachable", "state lost",
]  # fmt: skip
UNAVAILABLE: tuple[UnavailableReason, ...] = get_args(UnavailableReason)


class LensError(Exception):
    """Root of every error raised by the coordinator on purpose."""

    retriable: bool = False


class AlreadyClaimed(LensError):
    """Another holder's claim on ``key`` is live.

    ``owner`` names the holder when the Lens knows it (``None`` otherwise);
    ``remaining`` is how many seconds its lease had left when the Lens
    answered (``None`` when unknown): the earliest the claim can lapse, unless
    its holder extends it.
    """

    def __init__(self, key: str, owner: str | None, remaining: float | None = None) -> None:
        holder = f" by {owner}" if owner else ""
        super().__init__(f"{key!r} is claimed{holder}")
        self.key = key
        self.owner = owner
        self.remaining = remaining


class AlreadyDone(LensError):
    """``key`` was completed before; ``token`` is the fencing token that completed it."""

    def __init__(self, key: str, token: int) -> None:
        super().__init__(f"{key!r} was completed with token {token}")
        self.key = key
        self.token = token


class NotDue(LensError):
    """An attempt of ``key``'s job failed, and the next one, attempt
    ``attempt``, is not due for ``remaining`` seconds (its backoff, by
    Redis's clock): a copy met now waits that long."""

    def __init__(self, key: str, remaining: float, attempt: int) -> None:
        super().__init__(f"{key!r} attempt {attempt} is due in {remaining:.3f}s")
        self.key = key
        self.remaining = remaining
        self.attempt = attempt


class AttemptsSpent(LensError):
    """``key``'s job was buried as a dead letter after attempt ``made``: a
    copy met now is not run (requeueing the dead letter starts again)."""

    def __init__(self, key: str, made: int) -> None:
        super().__init__(f"{key!r} was buried after attempt {made}")
        self.key = key
        self.made = made


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
    ``reason`` says why, in one of the words of :data:`UNAVAILABLE`.
    """

    retriable = True

    def __init__(self, message: str, reason: UnavailableReason = "unreachable") -> None:
        super().__init__(message)
        self.reason: UnavailableReason = reason

    @property
    def misconfigured(self) -> bool:
        """Whether this is the caller's mistake (credentials or an ACL that
        Redis refuses), to be said at start-up, rather than an outage to
        wait out (full, read-only, a shard without a master...)."""
        return self.reason == "refused"


class LensStateLost(LensUnavailable):
    """Redis no longer holds the Lens's state: the epoch marker this Lens saw
    is gone (``found`` is ``None``) or was replaced (``found`` is the new one).

    Every claim, done marker and in-flight record from before is gone with
    it: no claim granted before is held any more, completed jobs may run
    again, and jobs whose only copy was an in-flight record are lost. Fencing
    tokens still never go backwards. The Lens raises this once per loss, logs
    it as an error and counts it (``Lens.state_losses``); its next call adopts
    or creates a new epoch and works again (docs/coordination.md has the
    operator's runbook).
    """

    def __init__(self, redis: str, lost: str, found: str | None) -> None:
        what = "is gone" if found is None else f"was replaced by {found!r}"
        message = f"Redis {redis} lost the Lens's state: epoch {lost!r} {what}"
        super().__init__(message, "state lost")
        self.redis = redis
        self.lost = lost
        self.found = found
