"""Which Redis the Lens talks to, from a URL: one server, or a Redis Cluster.

::

    redis://[[user]:password@]host:port/db      one Redis (a primary)
    rediss://...                                 the same, over TLS
    unix://[[user]:password@]/path/to.sock?db=0  one Redis on a Unix socket
    redis+cluster://[[user]:password@]host:port[,host:port...]/
                                                 a Redis Cluster: any of its
                                                 nodes, to discover the rest
    redis+sentinel://[[user]:password@]host:port[,host:port...]/name[/db]
                                                 the primary that Sentinels
                                                 at host:port... know as
                                                 ``name`` (the password is
                                                 the primary's)

A cluster has only database 0, so its path is empty, ``/`` or ``/0``. Every
check here raises ``ValueError`` with one line that names the URL without its
password, so the CLI can print it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel

#: The Redis the Lens uses when none is given: one on this machine, database 0.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

#: Either client: both run the Lens's scripts, pipelines and plain commands.
RedisClient = Redis | RedisCluster

_SINGLE = ("redis", "rediss", "unix")
_CLUSTER = "redis+cluster"
_SENTINEL = "redis+sentinel"


def redacted(url: str) -> str:
    """``url`` with any user and password left out (it goes into logs)."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def masked(url: str) -> str:
    """``url`` with its password, if any, shown as ``***`` (for errors)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """A checked Redis URL: ``nodes`` are a cluster's nodes or the Sentinels
    (empty for one server); ``service`` the name Sentinels know the primary by."""

    url: str
    nodes: tuple[tuple[str, int], ...] = ()
    username: str | None = None
    password: str | None = None
    service: str | None = None
    db: int = 0

    @property
    def cluster(self) -> bool:
        return bool(self.nodes) and self.service is None

    @classmethod
    def from_url(cls, url: str) -> RedisTarget:
        parts = urlsplit(url)
        if parts.scheme in _SINGLE:
            database = parts.path.strip("/")
            # redis-py ignores a database that is not a number, and uses 0 instead.
            if parts.scheme != "unix" and database and not database.isdigit():
                raise ValueError(f"{masked(url)}: the database {database!r} is not a number")
            return cls(url)
        if parts.scheme not in (_CLUSTER, _SENTINEL):
            raise ValueError(
                f"{masked(url)!r} is not a Redis URL, like redis://127.0.0.1:6379/0, "
                "redis+cluster://10.0.0.1:7000,10.0.0.2:7000/ or "
                "redis+sentinel://10.0.0.1:26379/mymaster"
            )
        credentials, _, hosts = parts.netloc.rpartition("@")
        username, _, password = credentials.partition(":")
        nodes = tuple(_node(url, text) for text in hosts.split(","))
        user, secret = unquote(username) or None, unquote(password) if password else None
        path = parts.path.strip("/")
        if parts.scheme == _CLUSTER:
            if path not in ("", "0"):
                raise ValueError(f"{masked(url)}: a Redis Cluster has only database 0")
            return cls(url, nodes, user, secret)
        service, _, database = path.partition("/")
        if not service:
            raise ValueError(
                f"{masked(url)}: name the primary, as in redis+sentinel://10.0.0.1:26379/mymaster"
            )
        if database and not database.isdigit():
            raise ValueError(f"{masked(url)}: the database {database!r} is not a number")
        return cls(url, nodes, user, secret, service, int(database or 0))

    def client(self, **options: Any) -> RedisClient:
        """A client for this Redis; ``options`` are the connection settings."""
        if self.service is not None:
            # The Sentinels are asked with the same timeouts; no credentials.
            asked = {k: v for k, v in options.items() if k.startswith("socket_")}
            sentinel = Sentinel(list(self.nodes), sentinel_kwargs=asked)  # type: ignore[no-untyped-call,unused-ignore]
            master: Redis = sentinel.master_for(
                self.service, db=self.db, username=self.username, password=self.password,
                **options,
            )  # fmt: skip
            return master
        if not self.cluster:
            return Redis.from_url(self.url, **options)
        startup = [ClusterNode(host, port) for host, port in self.nodes]
        return RedisCluster(
            startup_nodes=startup, username=self.username, password=self.password, **options
        )


def _node(url: str, text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"{masked(url)}: {text!r} is not a cluster node as host:port, like 10.0.0.1:7000"
        )
    return host.strip("[]"), int(port)


async def close(client: RedisClient) -> None:
    """Close ``client``, and the connections to the Sentinels it asked, if any."""
    await client.aclose()
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    if isinstance(manager, Sentinel):
        for sentinel in manager.sentinels:
            await sentinel.aclose()
