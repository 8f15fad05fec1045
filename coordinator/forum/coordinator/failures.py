"""What a Redis error says of the Lens: that Redis cannot serve it now, and
why (:class:`LensUnavailable` with one word of forum.coordinator.errors
UNAVAILABLE), or that it refused something (:class:`LensError`)."""

from __future__ import annotations

from redis import exceptions as redis_errors

from forum.coordinator.errors import LensError, LensUnavailable, UnavailableReason
from forum.coordinator.scripts import ReplicasBehind

#: Redis error replies that mean "not now" rather than "never", and what each
#: says of the Lens (forum.coordinator.errors, UNAVAILABLE): a server out of memory
#: (maxmemory with noeviction), a replica after a failover, an AOF or snapshot
#: write that failed, too few replicas, a shard without a master, a server
#: still loading its AOF, a busy script, credentials or commands refused.
_UNAVAILABLE_REPLIES: dict[str, UnavailableReason] = {
    "OOM": "full",
    "READONLY": "read-only",
    "MISCONF": "read-only",
    "NOREPLICAS": "replicas behind",
    "MASTERDOWN": "master down",
    "CLUSTERDOWN": "master down",
    "TRYAGAIN": "master down",
    "LOADING": "loading",
    "BUSY": "busy",
    "NOAUTH": "refused",
    "WRONGPASS": "refused",
    "NOPERM": "refused",
}

#: redis-py's own classes for some of those replies (it strips the reply's
#: first word from their messages), and for refusals it makes itself. The
#: first that matches decides: a MasterDownError is a ClusterDownError, a
#: BusyLoadingError and an AuthenticationError are ConnectionErrors.
_UNAVAILABLE_CLASSES: tuple[tuple[type[Exception], UnavailableReason], ...] = (
    (ReplicasBehind, "replicas behind"),
    (redis_errors.OutOfMemoryError, "full"),
    (redis_errors.ReadOnlyError, "read-only"),
    (redis_errors.ClusterDownError, "master down"),
    (redis_errors.TryAgainError, "master down"),
    (redis_errors.SlotNotCoveredError, "master down"),
    (redis_errors.BusyLoadingError, "loading"),
    (redis_errors.AuthenticationError, "refused"),
    (redis_errors.AuthorizationError, "refused"),
    (redis_errors.NoPermissionError, "refused"),
    (redis_errors.ConnectionError, "unreachable"),
    (redis_errors.TimeoutError, "unreachable"),
    (redis_errors.RedisClusterException, "unreachable"),
    (OSError, "unreachable"),
)


def translate(exc: Exception) -> LensError:
    """The Lens's error for a Redis client error or error reply: a
    :class:`LensUnavailable` with its reason when Redis cannot serve the Lens
    now (forum.coordinator.errors, UNAVAILABLE), else a :class:`LensError`."""
    reason = _unavailable_reason(exc)
    if reason is None and isinstance(exc, redis_errors.ResponseError):
        return LensError(f"Redis refused a Lens script: {exc}")
    if reason is None:
        return LensError(f"Redis failed a Lens call: {exc}")
    if isinstance(exc, ReplicasBehind):
        return LensUnavailable(f"Redis could not make the Lens's writes durable: {exc}", reason)
    if reason == "unreachable":
        return LensUnavailable(f"Redis unavailable: {exc}", reason)
    return LensUnavailable(f"Redis cannot serve the Lens now ({reason}): {_reply(exc)}", reason)


def _unavailable_reason(exc: Exception) -> UnavailableReason | None:
    """Why ``exc`` says Redis cannot serve the Lens now; ``None`` when it
    says something else (a script's own error, a bad argument)."""
    for kind, reason in _UNAVAILABLE_CLASSES:
        if isinstance(exc, kind):
            return reason
    if isinstance(exc, redis_errors.ResponseError):
        return _UNAVAILABLE_REPLIES.get(_reply(exc).split(" ", 1)[0])
    return None


def _reply(exc: Exception) -> str:
    """The error reply as Redis sent it, its first word included (redis-py
    keeps that word in ``status_code`` and strips it from the message of the
    replies it has a class for)."""
    text = str(exc)
    code = getattr(exc, "status_code", None)
    if code and not text.startswith(code):
        return f"{code} {text}"
    return text
