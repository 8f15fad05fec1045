"""A real Redis made full the way the recommended settings fill one
(``maxmemory`` with ``noeviction``: every write refused with ``OOM``), and
given room again the way an operator would."""

from __future__ import annotations

import redis

__all__ = ["fill", "make_room"]


def fill(port: int) -> None:
    """Make the Redis on ``port`` full: some junk, then ``maxmemory`` below
    what it uses, by far (a server at the edge would refuse one write and
    take the next)."""
    with redis.Redis(port=port, socket_timeout=5) as r:
        r.config_set("maxmemory-policy", "noeviction")
        with r.pipeline(transaction=False) as pipe:
            for i in range(200):
                pipe.set(f"junk:{i}", b"x" * 10_000)
            pipe.execute()
        used = int(r.info("memory")["used_memory"])
        r.config_set("maxmemory", used // 2)


def make_room(port: int) -> None:
    """Free memory the way an operator would: raise ``maxmemory`` (0: none)."""
    with redis.Redis(port=port, socket_timeout=5) as r:
        r.config_set("maxmemory", 0)
