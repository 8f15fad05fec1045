"""The node service's configuration: one frozen value, from four layers.

Later layers win, key by key::

    defaults  <  TOML file (--config / FORUM_CONFIG)  <  FORUM_* environment  <  flags

Every key has the same name everywhere: ``data_dir`` in TOML is
``FORUM_DATA_DIR`` in the environment and ``--data-dir`` on the command line.
``peers`` is a list in TOML, comma-separated in ``FORUM_PEERS``, and the
repeatable ``--peer`` flag. Sizes take a unit (``64MiB``), times are seconds.

No option is silently ignored: a value of the wrong type or out of bounds,
an unknown key in the file, and a ``FORUM_*`` variable that names no key
(but those in :data:`OTHER_VARIABLES` and :data:`OTHER_PREFIXES`) are each a
one-line ``ValueError`` that starts with where it came from (the file, the
variable, the flag). The loading itself is :mod:`forum.node.config.settings`; the fields'
annotations say what each key accepts.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from msgspec import Meta

from forum.node.api.model import Limits
from forum.node.config.origin import WebOrigin, check_host_name
from forum.node.config.settings import (
    HIDDEN,
    SIZE,
    SIZE_TEXT,
    Check,
    Layer,
    PositiveInt,
    PositiveSeconds,
    Seconds,
    SettingError,
    Size,
    build,
    check_fields,
    read_toml,
)
from forum.node.core.entries import check_origin
from forum.node.core.space import MAX_WAIT as MAX_WRITE_WAIT
from forum.node.space.copies import COPIES_TIMEOUT
from forum.node.space.surfacing import REMOTE_DELAY, REMOTE_HOLD
from forum.node.space.watch import BUFFER as WATCH_BUFFER
from forum.node.space.watch import HEARTBEAT as WATCH_HEARTBEAT
from forum.node.space.watch import QUEUE as WATCH_QUEUE
from forum.node.space.watch import QUEUE_BYTES as WATCH_QUEUE_BYTES
from forum.node.storage.strand import MIN_SEGMENT_BYTES, payload_limit
from forum.node.storage.writer import FsyncPolicy

LogFormat = Literal["text", "json"]

DEFAULT_LISTEN = "127.0.0.1:7070"
#: The node a client, a worker and an app talk to when told none: this machine's, on defaults.
DEFAULT_NODE = f"http://{DEFAULT_LISTEN}"
#: Seconds a member may go unheard before it is forgotten (one day; see
#: ``NodeConfig.forget_after`` and docs/operations.md, "Forgetting a member").
FORGET_AFTER = 86_400.0
ENV_PREFIX = "FORUM_"
#: The environment variable naming a TOML file, when ``--config`` is not given.
ENV_CONFIG = "FORUM_CONFIG"
#: ``FORUM_*`` variables that are not node settings, so not misspellings of
#: one: the other ``forum`` commands' (docs/operations.md lists them).
OTHER_VARIABLES = frozenset({ENV_CONFIG, "FORUM_NODE", "FORUM_REDIS_URL", "FORUM_EVENT_LOOP"})
#: Prefixes of ``FORUM_*`` names that belong to others: replication's settings
#: (checked by ``ReplicationConfig``) and the example handlers'.
OTHER_PREFIXES = ("FORUM_REPL_", "FORUM_EXAMPLE_")
MiB = 1024 * 1024


def _parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` to ``(host, port)``; ``ValueError`` otherwise."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen must be HOST:PORT, not {listen!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise ValueError(f"listen must be HOST:PORT: {exc}") from None
    elif ":" in host:
        raise ValueError(f"write an IPv6 listen address in brackets: [{host}]:{port}")
    return host, int(port)


def _check_node_id(name: str) -> None:
    try:
        check_origin(name)
    except ValueError as exc:
        raise ValueError(f"node_id: {exc}") from None


def _check_url(what: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an http(s) URL, not {url!r}")


def _check_peers(urls: tuple[str, ...]) -> None:
    for url in urls:
        _check_url("peer", url)


def _check_limits(limits: Mapping[str, Any]) -> None:
    for prefix, limit in limits.items():
        # type(): TOML's 2.0 and true are not a number of tuples.
        if type(limit) is not int or limit < 1:
            raise ValueError(
                f"limits: the limit of {prefix!r} must be a whole number of tuples >= 1, "
                f"not {limit!r}"
            )


def _check_origins(origins: tuple[str, ...]) -> None:
    for origin in origins:
        try:
            WebOrigin.parse(origin)
        except ValueError as exc:
            raise ValueError(f"allow_origins: {exc}") from None


def _check_hosts(names: tuple[str, ...]) -> None:
    for name in names:
        try:
            check_host_name(name)
        except ValueError as exc:
            raise ValueError(f"allow_hosts: {exc}") from None


Listen = Annotated[str, Meta(description="HOST:PORT"), Check(_parse_listen)]
NodeName = Annotated[
    str, Meta(description="a name of letters, digits and -_."), Check(_check_node_id)
]
URL = Annotated[
    str, Meta(description="an http(s) URL"), Check(lambda url: _check_url("advertise", url))
]
URLs = Annotated[tuple[str, ...], Meta(description="a list of http(s) URLs"), Check(_check_peers)]
Secret = Annotated[
    str,
    Meta(pattern=r"^\S(?:.*\S)?\Z", description="non-empty, without surrounding spaces"),
    HIDDEN,
]
LogLevel = Annotated[
    str,
    Meta(
        pattern=r"(?i)^(debug|info|warning|error|critical)\Z",
        description="a logging level name (DEBUG, INFO, WARNING, ERROR or CRITICAL)",
    ),
]
SegmentSize = Annotated[
    int,
    Meta(ge=MIN_SEGMENT_BYTES, description=f"at least {MIN_SEGMENT_BYTES} bytes, {SIZE_TEXT}"),
    SIZE,
]
Origins = Annotated[
    tuple[str, ...],
    Meta(description="a list of origins (scheme://host[:port])"),
    Check(_check_origins),
]
HostNames = Annotated[
    tuple[str, ...], Meta(description="a list of host names"), Check(_check_hosts)
]
DataDir = Annotated[Path, Meta(description="a path")]
MapPath = Annotated[Path, Meta(description="a path to a TOML or JSON cluster map")]
GroupName = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z",
        description="a group id of 1-64 letters, digits, '_', '.' or '-'",
    ),
]
Ratio = Annotated[float, Meta(ge=0, le=1, description="a share between 0 and 1")]
#: Values are judged by the check, not coerced: a limit is an int as written.
PrefixLimits = Annotated[
    dict[str, Any],
    Meta(description='a table of prefix = most tuples, such as {"job/" = 100000}'),
    Check(_check_limits),
]


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything ``forum serve`` needs to run one node.

    The defaults work on a fresh machine: loopback only, data in
    ``./forum-data``, and no acknowledged write lost (fsync ``always``).
    """

    #: ``HOST:PORT`` to listen on (``[::1]:7070`` for IPv6). Port 0 picks a free one.
    listen: Listen = DEFAULT_LISTEN
    data_dir: DataDir = Path("forum-data")
    #: The node's name, the stem of its origin; ``None`` uses the host name.
    node_id: NodeName | None = None
    #: Base URLs of seed peers (used by replication).
    peers: URLs = ()
    #: The cluster map (a TOML or JSON file, forum.node.cluster.map): the replica
    #: groups. ``None``: this node's cluster is one group, as without scale-out.
    cluster_map: MapPath | None = None
    #: This node's replica group in the map; ``None``: the group the map lists
    #: ``advertise`` in. Without ``peers``, the group's other members are the peers.
    group: GroupName | None = None
    #: The URL peers should use to reach this node; ``None`` derives it from ``listen``.
    advertise: URL | None = None
    fsync: FsyncPolicy = "always"
    #: With fsync ``interval``: seconds between background fsyncs, the most a
    #: power loss can lose (see docs/operations.md).
    fsync_interval: PositiveSeconds = 0.05
    #: How large a Strand segment file grows before the next one is started.
    #: A tuple must fit one segment, so it bounds ``max_payload``.
    segment_bytes: SegmentSize = 64 * MiB
    #: Clients must send ``Authorization: Bearer <token>``; ``None`` leaves the API open.
    token: Secret | None = None
    #: A second token that may only read (``GET`` and ``HEAD``, not the
    #: stream): the dashboard's pages and status for an observer who must not
    #: act (forum.node.http.auth). Needs ``token``.
    read_token: Secret | None = None
    #: The Lens's Redis (``redis://...``, as ``forum worker --redis``) that the
    #: dashboard reads jobs, workers and the Lens's figures from, and acts on
    #: jobs through. The node itself never uses it; ``None``: the dashboard's
    #: Jobs and Workers panels say no Lens is configured.
    lens_url: Secret | None = None
    #: Origins (``scheme://host[:port]``) besides the node's own whose pages
    #: may call it from a browser: the name a proxy in front of the node
    #: serves it under (``https://forum.example.com``). Any other ``Origin``
    #: is refused (forum.node.http.auth).
    allow_origins: Origins = ()
    #: Host names besides the node's own (loopback, its listen, advertise and
    #: peer addresses, the machine's name) that a node without a token
    #: answers to; any other ``Host`` is refused, against DNS rebinding
    #: (forum.node.http.auth).
    allow_hosts: HostNames = ()
    #: Peers must present this on the cluster routes; ``None`` leaves them open.
    cluster_secret: Secret | None = None
    #: The largest single tuple, in bytes.
    max_payload: Size = 1 * MiB
    #: The most tuples in one batch write or batch take.
    max_batch: PositiveInt = 10_000
    #: The largest batch request body, in bytes.
    max_batch_bytes: Size = 64 * MiB
    #: The most bytes of request bodies (HTTP bodies and stream frames over
    #: 64 KiB) the node holds at once, from the first byte read until the
    #: request is answered (its payloads durable): past it a request waits up
    #: to ``body_budget_wait`` for room, then gets 503 ``busy`` with
    #: ``Retry-After`` (a stream's message waits unread as long as it takes).
    #: A body larger than the whole budget runs alone.
    body_budget: Size = 256 * MiB
    #: Seconds a request over ``body_budget`` waits for room before its 503.
    body_budget_wait: Seconds = 5.0
    #: The longest a long-poll take or read may wait, in seconds; longer asks are cut to it.
    max_wait: Seconds = 60.0
    #: The most requests waiting at once in long polls; more get 503 and Retry-After.
    max_waiters: PositiveInt = 10_000
    #: Seconds (times the node's turn for it, its rank) a tuple written on a
    #: peer waits before it can be taken here, so the node it was written on
    #: hands it out first and the others in turn (see ``Forum.apply``); 0
    #: makes it live on arrival.
    remote_delay: Seconds = REMOTE_DELAY
    #: Seconds a remote tuple whose turn came while no taker here wanted it is
    #: held back (taken here only when nothing live matches) before it is
    #: live; 0 makes it live at its turn.
    remote_hold: Seconds = REMOTE_HOLD
    #: How many members (this node one of them) must hold a write durably
    #: before it is acknowledged, for a write that does not say (``copies``);
    #: 1, the default, answers once it is durable here, as fast as ever
    #: (docs/operations.md, "Copies").
    ack_copies: PositiveInt = 1
    #: Seconds a write waits for its copies before it is answered with how
    #: many members hold it (HTTP 504 ``too_few_copies``; it stays written).
    copies_timeout: PositiveSeconds = COPIES_TIMEOUT
    #: Seconds between two looks of the background compactor at the Strand
    #: (docs/operations.md, "Compaction"); 0 turns background compaction off.
    compact_interval: Seconds = 10.0
    #: The share of the Strand's entries that must be dead (neither live nor
    #: reserved) for a background compaction pass to run.
    compact_dead_ratio: Ratio = 0.5
    #: Seconds a cluster member may go unheard (no good call to it, no request
    #: from it) before it is forgotten: it no longer holds compaction back, and
    #: a learned (not ``--peer``) one leaves the peer table. A member that comes
    #: back later is caught up from the others' pages, its stale copies killed
    #: (docs/operations.md, "Forgetting a member").
    forget_after: PositiveSeconds = FORGET_AFTER
    #: On SIGTERM, how long in-flight requests get to finish, in seconds.
    shutdown_timeout: Seconds = 10.0
    #: A connection that has not sent a whole request head this many seconds
    #: after it opened (or after its last answer) is closed: idle keep-alive
    #: connections and clients that send their headers a byte at a time alike.
    idle_timeout: PositiveSeconds = 30.0
    #: A request body must have arrived this many seconds after its head;
    #: a slower one is answered 408 and its connection closed.
    body_timeout: PositiveSeconds = 60.0
    #: The most client connections open at once; ``None`` is the process's
    #: open-file limit less a reserve for the Strand and the peers. Past it, a
    #: new connection first pushes out the oldest one that never sent a whole
    #: request head, else it is closed at once.
    max_connections: PositiveInt | None = None
    #: How many of the latest events a node keeps for watchers that resume
    #: (``GET /v1/watch`` with ``Last-Event-ID``); an older id is told it missed some.
    watch_buffer: PositiveInt = WATCH_BUFFER
    #: How many events a watcher may fall behind before its stream is cut off
    #: with an ``overflow`` event (the node never waits for a watcher).
    watch_queue: PositiveInt = WATCH_QUEUE
    #: How many bytes of events a watcher may fall behind before it is cut off.
    watch_queue_bytes: Size = WATCH_QUEUE_BYTES
    #: Seconds between two ``: keepalive`` comments on an idle watch stream.
    watch_heartbeat: PositiveSeconds = WATCH_HEARTBEAT
    log_format: LogFormat = "text"
    log_level: LogLevel = "INFO"
    #: Per prefix (UTF-8 text), the most live tuples it may hold on this node:
    #: a local write past it gets 429 (or waits, with ``wait``); replicated
    #: writes are never refused (docs/scheduling.md). ``FORUM_LIMITS`` and
    #: ``--limits`` spell it ``job/=100000,mail/=500``.
    limits: PrefixLimits = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.max_payload > payload_limit(self.segment_bytes):
            raise SettingError(
                f"max_payload must be at most {payload_limit(self.segment_bytes)} bytes: "
                f"a tuple must fit one record of a {self.segment_bytes}-byte segment",
                "max_payload",
                "segment_bytes",
            )
        if self.read_token is not None and self.token in (None, self.read_token):
            raise SettingError(
                "read_token needs a token, and must differ from it", "read_token", "token"
            )
        if self.group is not None and self.cluster_map is None:
            raise SettingError("group needs a cluster_map that lists it", "group", "cluster_map")
        if self.max_batch_bytes < self.max_payload:
            raise SettingError(
                "max_batch_bytes must be at least max_payload", "max_batch_bytes", "max_payload"
            )

    # -- derived ---------------------------------------------------------------

    @property
    def prefix_limits(self) -> dict[bytes, int]:
        """``limits`` as the Forum takes them: prefixes as bytes."""
        return {prefix.encode(): limit for prefix, limit in self.limits.items()}

    @property
    def host(self) -> str:
        return _parse_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return _parse_listen(self.listen)[1]

    @property
    def api_limits(self) -> Limits:
        """The bounds this node enforces and advertises (its OpenAPI document says them)."""
        return Limits(
            self.max_payload,
            self.max_batch,
            self.max_batch_bytes,
            self.max_wait,
            max_write_wait=min(self.max_wait, MAX_WRITE_WAIT),
        )

    def advertise_url(self, port: int | None = None) -> str:
        """The URL peers should use: ``advertise`` if set, else one made from ``listen``.

        ``port`` is the port actually bound, for ``listen`` with port 0.
        """
        if self.advertise is not None:
            return self.advertise.rstrip("/")
        host = self.host
        if host in ("", "0.0.0.0", "::"):
            # A wildcard is not an address anyone can dial; loopback is at least true.
            host = "127.0.0.1" if host != "::" else "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port if port is None else port}"

    # -- loading ---------------------------------------------------------------

    @classmethod
    def load(
        cls,
        config_file: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        flags: Mapping[str, Any] | None = None,
    ) -> NodeConfig:
        """Merge the layers key by key: defaults, then the TOML file, then
        ``env``, then ``flags``; the result is judged once, as a whole.

        ``env`` defaults to ``os.environ``; ``flags`` maps keys to values that
        were given (leave out what was not). The file is ``config_file``, or
        ``$FORUM_CONFIG`` when that is unset.
        """
        env = os.environ if env is None else env
        config_file = config_file or env.get(ENV_CONFIG) or None
        layers = [] if config_file is None else [Layer.toml_file(config_file)]
        layers.append(_env_layer(env))
        layers.append(Layer(flags or {}, _flag, _flag))
        return build(cls, layers)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> NodeConfig:
        return build(cls, [Layer.toml_file(path)])

    @staticmethod
    def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
        return read_toml(path)

    def merged(self, values: Mapping[str, Any], source: str) -> NodeConfig:
        """A copy with ``values`` (from ``source``) applied; text is parsed to each key's type."""
        return build(type(self), [Layer.named(values, source)], base=self)


def _env_layer(env: Mapping[str, str]) -> Layer:
    return Layer.environment(
        env,
        ENV_PREFIX,
        skip=lambda name: name in OTHER_VARIABLES or name.startswith(OTHER_PREFIXES),
    )


#: The keys ``forum serve`` takes as a repeatable flag of another spelling.
REPEATED_FLAGS = {
    "peers": "--peer",
    "allow_origins": "--allow-origin",
    "allow_hosts": "--allow-host",
}


def _flag(key: str) -> str:
    """How ``forum serve`` spells a key as a flag (``peers`` is the repeatable ``--peer``)."""
    return REPEATED_FLAGS.get(key, f"--{key.replace('_', '-')}")
