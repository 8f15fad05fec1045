"""The node service's configuration: one frozen value, from four layers.

Later layers win, key by key::

    defaults  <  TOML file (--config / FORUM_CONFIG)  <  FORUM_* environment  <  flags

Every key has the same name everywhere: ``data_dir`` in TOML is
``FORUM_DATA_DIR`` in the environment and ``--data-dir`` on the command line.
``peers`` is a list in TOML, comma-separated in ``FORUM_PEERS``, and the
repeatable ``--peer`` flag. An unknown key in a file or a value of the wrong
type is a ``ValueError`` naming where it came from: no option is silently
ignored.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from node.entries import check_origin
from node.forum import REMOTE_DELAY
from node.strand import MIN_SEGMENT_BYTES, payload_limit

FsyncPolicy = Literal["always", "interval", "never"]
LogFormat = Literal["text", "json"]

DEFAULT_LISTEN = "127.0.0.1:7070"
ENV_PREFIX = "FORUM_"
#: The environment variable naming a TOML file, when ``--config`` is not given.
ENV_CONFIG = "FORUM_CONFIG"
MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything ``forum serve`` needs to run one node.

    The defaults work on a fresh machine: loopback only, data in
    ``./forum-data``, and no acknowledged write lost (fsync ``always``).
    """

    #: ``HOST:PORT`` to listen on (``[::1]:7070`` for IPv6). Port 0 picks a free one.
    listen: str = DEFAULT_LISTEN
    data_dir: Path = Path("forum-data")
    #: The node's name, the stem of its origin; ``None`` uses the host name.
    node_id: str | None = None
    #: Base URLs of seed peers (used by replication).
    peers: tuple[str, ...] = ()
    #: The URL peers should use to reach this node; ``None`` derives it from ``listen``.
    advertise: str | None = None
    fsync: FsyncPolicy = "always"
    #: With fsync ``interval``: seconds between background fsyncs, the most a
    #: power loss can lose (see docs/operations.md).
    fsync_interval: float = 0.05
    #: How large a Strand segment file grows before the next one is started.
    #: A tuple must fit one segment, so it bounds ``max_payload``.
    segment_bytes: int = 64 * MiB
    #: Clients must send ``Authorization: Bearer <token>``; ``None`` leaves the API open.
    token: str | None = None
    #: Peers must present this on the cluster routes; ``None`` leaves them open.
    cluster_secret: str | None = None
    #: The largest single tuple, in bytes.
    max_payload: int = 1 * MiB
    #: The most tuples in one batch write or batch take.
    max_batch: int = 10_000
    #: The largest batch request body, in bytes.
    max_batch_bytes: int = 64 * MiB
    #: The longest a long-poll take or read may wait, in seconds; longer asks are cut to it.
    max_wait: float = 60.0
    #: The most requests waiting at once in long polls; more get 503 and Retry-After.
    max_waiters: int = 10_000
    #: Seconds (times 1 to 4) a tuple written on a peer waits before it can be
    #: taken here, so the node it was written on usually hands it out first
    #: (see ``Forum.apply``); 0 makes it live on arrival.
    remote_delay: float = REMOTE_DELAY
    #: On SIGTERM, how long in-flight requests get to finish, in seconds.
    shutdown_timeout: float = 10.0
    #: A connection that has not sent a whole request head this many seconds
    #: after it opened (or after its last answer) is closed: idle keep-alive
    #: connections and clients that send their headers a byte at a time alike.
    idle_timeout: float = 30.0
    #: A request body must have arrived this many seconds after its head;
    #: a slower one is answered 408 and its connection closed.
    body_timeout: float = 60.0
    #: The most client connections open at once; ``None`` is the process's
    #: open-file limit less a reserve for the Strand and the peers. Past it, a
    #: new connection first pushes out the oldest one that never sent a whole
    #: request head, else it is closed at once.
    max_connections: int | None = None
    log_format: LogFormat = "text"
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        _parse_listen(self.listen)
        if self.node_id is not None:
            check_origin(self.node_id)
        for url in self.peers:
            _check_url("peer", url)
        if self.advertise is not None:
            _check_url("advertise", self.advertise)
        if self.fsync not in get_args(FsyncPolicy):
            raise ValueError(f"fsync must be always, interval or never, not {self.fsync!r}")
        if not (
            isinstance(self.fsync_interval, int | float)
            and math.isfinite(self.fsync_interval)
            and self.fsync_interval > 0
        ):
            raise ValueError("fsync_interval must be a finite number of seconds > 0")
        if self.log_format not in get_args(LogFormat):
            raise ValueError(f"log_format must be text or json, not {self.log_format!r}")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(f"log_level must be a logging level name, not {self.log_level!r}")
        for name in ("token", "cluster_secret"):
            secret = getattr(self, name)
            if secret is not None and (not secret or secret != secret.strip()):
                raise ValueError(f"{name} must be non-empty, without surrounding spaces")
        _check_positive("max_payload", self.max_payload)
        _check_positive("segment_bytes", self.segment_bytes)
        if self.segment_bytes < MIN_SEGMENT_BYTES:
            raise ValueError(f"segment_bytes must be at least {MIN_SEGMENT_BYTES}")
        if self.max_payload > payload_limit(self.segment_bytes):
            raise ValueError(
                f"max_payload must be at most {payload_limit(self.segment_bytes)} bytes: "
                f"a tuple must fit one record of a {self.segment_bytes}-byte segment"
            )
        _check_positive("max_batch", self.max_batch)
        _check_positive("max_waiters", self.max_waiters)
        if self.max_batch_bytes < self.max_payload:
            raise ValueError("max_batch_bytes must be at least max_payload")
        if self.max_connections is not None:
            _check_positive("max_connections", self.max_connections)
        for name in ("max_wait", "shutdown_timeout", "remote_delay"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0")
        for name in ("idle_timeout", "body_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number of seconds > 0")

    # -- derived ---------------------------------------------------------------

    @property
    def host(self) -> str:
        return _parse_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return _parse_listen(self.listen)[1]

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
        """Merge the layers: defaults, then the TOML file, then ``env``, then ``flags``.

        ``env`` defaults to ``os.environ``; ``flags`` maps keys to values that
        were given (leave out what was not). The file is ``config_file``, or
        ``$FORUM_CONFIG`` when that is unset.
        """
        env = os.environ if env is None else env
        config_file = config_file or env.get(ENV_CONFIG) or None
        config = cls()
        if config_file is not None:
            config = config.merged(cls.read_toml(config_file), source=str(config_file))
        config = config.merged(cls.env_values(env), source="environment")
        return config.merged(flags or {}, source="flags")

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> NodeConfig:
        return cls().merged(cls.read_toml(path), source=str(path))

    @staticmethod
    def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
        try:
            with open(path, "rb") as f:
                return tomllib.load(f)
        except OSError as exc:
            raise ValueError(f"cannot read config file {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"config file {path} is not valid TOML: {exc}") from exc

    @classmethod
    def env_values(cls, env: Mapping[str, str]) -> dict[str, str]:
        """The ``FORUM_<KEY>`` variables that name a config key (others are not ours)."""
        keys = {f.name for f in dataclasses.fields(cls)}
        values = {}
        for name, value in env.items():
            if name.startswith(ENV_PREFIX) and name != ENV_CONFIG:
                key = name[len(ENV_PREFIX) :].lower()
                if key in keys:
                    values[key] = value
        return values

    def merged(self, values: Mapping[str, Any], source: str) -> NodeConfig:
        """A copy with ``values`` applied; strings are parsed to each key's type."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for raw_key, value in values.items():
            key = raw_key.replace("-", "_")
            if key not in fields:
                raise ValueError(f"{source}: unknown config key {raw_key!r}")
            try:
                changes[key] = _coerce(key, value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{source}: {key}: {exc}") from exc
        try:
            return dataclasses.replace(self, **changes)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from exc


_INT_KEYS = frozenset(
    {
        "max_payload",
        "max_batch",
        "max_batch_bytes",
        "max_waiters",
        "max_connections",
        "segment_bytes",
    }
)
_FLOAT_KEYS = frozenset(
    {
        "max_wait",
        "shutdown_timeout",
        "remote_delay",
        "idle_timeout",
        "body_timeout",
        "fsync_interval",
    }
)
_OPTIONAL_KEYS = frozenset({"node_id", "advertise", "token", "cluster_secret", "max_connections"})


def _coerce(key: str, value: Any) -> Any:
    """Turn a value from TOML, the environment or a flag into the key's type."""
    if key == "peers":
        if isinstance(value, str):
            return tuple(p.strip() for p in value.split(",") if p.strip())
        if isinstance(value, list | tuple) and all(isinstance(p, str) for p in value):
            return tuple(value)
        raise TypeError("peers must be a list of URLs")
    if key == "data_dir":
        if not isinstance(value, str | os.PathLike) or not str(value):
            raise TypeError("data_dir must be a path")
        return Path(value)
    if key in _OPTIONAL_KEYS and value is None:
        return None
    if key in _INT_KEYS:
        return _as_int(value)
    if key in _FLOAT_KEYS:
        if isinstance(value, bool):
            raise TypeError("expected a number of seconds")
        return float(value)
    if not isinstance(value, str):
        raise TypeError(f"expected a string, not {type(value).__name__}")
    return value


_UNITS = {"k": 1024, "kib": 1024, "m": MiB, "mib": MiB, "g": 1024 * MiB, "gib": 1024 * MiB}


def _as_int(value: Any) -> int:
    """An int, also from text such as ``"1048576"``, ``"512KiB"`` or ``"4M"``."""
    if isinstance(value, bool):
        raise TypeError("expected an integer")
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise TypeError(f"expected an integer, not {type(value).__name__}")
    text = value.strip().lower().replace("_", "")
    digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(digits) :].strip()
    if unit and unit not in _UNITS:
        raise ValueError(f"unknown size unit in {value!r} (use KiB, MiB or GiB)")
    return int(digits) * _UNITS.get(unit, 1)


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")


def _parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` to ``(host, port)``; ``ValueError`` otherwise."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen must be HOST:PORT, not {listen!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        ipaddress.IPv6Address(host)
    elif ":" in host:
        raise ValueError(f"write an IPv6 listen address in brackets: [{host}]:{port}")
    return host, int(port)


def _check_url(what: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an http(s) URL, not {url!r}")
