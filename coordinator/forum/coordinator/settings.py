"""Where the Lens's Redis is and how the Lens behaves (:class:`LensConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from forum.coordinator import keys
from forum.coordinator.redis_url import DEFAULT_REDIS_URL, RedisTarget
from forum.node.config.node import FORGET_AFTER


@dataclass(frozen=True, slots=True)
class LensConfig:
    """Where the Lens's Redis is and how the Lens behaves. Times in seconds."""

    url: str = DEFAULT_REDIS_URL
    namespace: str = keys.DEFAULT_NAMESPACE
    #: The cluster's ``forget_after`` (the node setting; the largest of its
    #: nodes'): how long a member cut off can still hold a copy of a job the
    #: others completed. The done markers' default retention follows it.
    forget_after: float = FORGET_AFTER
    #: How long a done marker turns copies away; ``None``: ``forget_after +
    #: keys.DONE_MARGIN`` (:attr:`retention`). Never below ``forget_after``.
    done_ttl: float | None = None
    #: How long a key's claim history is kept after its last event; 0 keeps
    #: none (the done marker alone turns copies away either way).
    history_ttl: float = keys.HISTORY_TTL
    #: How long a reaper's grab of an abandoned record lasts.
    reaper_lease: float = keys.REAPER_LEASE
    #: verify() refuses with less than min(safety_margin, lease * MARGIN_FRACTION) left.
    safety_margin: float = keys.SAFETY_MARGIN
    #: Longest wait for one Redis reply; past it the call raises LensUnavailable.
    timeout: float = 2.0
    #: Longest wait for a TCP connection to Redis.
    connect_timeout: float = 1.0
    #: How many shards the namespace is split into (forum.coordinator.keys). Fixed
    #: for the namespace's life: a Lens with another count refuses it.
    shards: int = keys.DEFAULT_SHARDS
    #: After each batch that writes, ``WAIT`` until this many replicas of each
    #: master it wrote to hold the writes; 0: do not wait. A batch that
    #: reaches fewer within ``wait_timeout`` raises LensUnavailable (fail
    #: closed): what it claimed is not held by the caller and expires with
    #: its lease (docs/operations.md, "Redis topologies").
    wait_replicas: int = 0
    #: The longest ``WAIT``; shorter than ``timeout``, which bounds the reply.
    wait_timeout: float = 0.5
    #: Wait with ``WAITAOF`` instead: each batch's writes fsynced to the
    #: master's AOF and to ``wait_replicas`` replicas' AOFs. Needs Redis 7.2
    #: or newer (and ``appendonly yes``); an older one is refused at first use.
    wait_aof: bool = False

    def __post_init__(self) -> None:
        RedisTarget.from_url(self.url)
        keys.KeySchema(self.namespace, self.shards)
        for name in ("forget_after", "reaper_lease", "timeout", "connect_timeout", "wait_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.done_ttl is not None and self.done_ttl < self.forget_after:
            raise ValueError(
                f"done_ttl ({self.done_ttl:g} s) must not be shorter than forget_after "
                f"({self.forget_after:g} s): a member cut off that long may still offer "
                "a completed job, which would run again"
            )
        if self.history_ttl < 0:
            raise ValueError("history_ttl must not be negative")
        if self.safety_margin < 0:
            raise ValueError("safety_margin must not be negative")
        if self.wait_replicas < 0:
            raise ValueError("wait_replicas must not be negative")
        if (self.wait_replicas or self.wait_aof) and self.wait_timeout >= self.timeout:
            raise ValueError("wait_timeout must be shorter than timeout")

    @property
    def retention(self) -> float:
        """Seconds a done marker lives: ``done_ttl``, else ``forget_after +
        keys.DONE_MARGIN`` (why: forum.coordinator.keys)."""
        return self.forget_after + keys.DONE_MARGIN if self.done_ttl is None else self.done_ttl
