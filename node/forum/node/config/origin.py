"""Web origins and ``Host`` names, as the node compares them: the browser rule
of :mod:`forum.node.http.auth`, and the ``allow_origins`` and ``allow_hosts``
settings of :mod:`forum.node.config.node` that widen it.

An origin is ``scheme://host[:port]`` (RFC 6454), what a browser sends in
``Origin`` for a page's requests. Two origins are the same when their
scheme, host and port are, the port a scheme implies standing in for one not
written (``http://a`` is ``http://a:80``). A ``Host`` header is a name (or an
address) and maybe a port; the node judges the name alone: DNS rebinding
hands a browser a node's address under another name, never another port.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

#: The port each scheme a page can be served over implies.
DEFAULT_PORTS = {"http": 80, "https": 443}
#: A DNS name: dot-separated labels of letters, digits and inner hyphens
#: (``_`` too, which some internal names use), with an optional final dot.
_NAME = re.compile(r"(?i)(?!-)[a-z0-9_-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9_-]{1,63}(?<!-))*\.?")


@dataclass(frozen=True, slots=True)
class WebOrigin:
    """One origin, normalised: scheme and host in lower case, the port always given."""

    scheme: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> WebOrigin:
        """``scheme://host[:port]`` (an ``http`` or ``https`` URL with nothing
        after its authority but a ``/``); ``ValueError`` naming what is wrong.
        ``null``, the origin of a sandboxed frame or a ``file:`` page, is not one."""
        try:
            parts = urlsplit(text.strip())
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"{text!r} is not scheme://host[:port]: {exc}") from None
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ValueError(f"{text!r} is not an http(s) origin (scheme://host[:port])")
        if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
            raise ValueError(f"{text!r} is an URL, not an origin: scheme://host[:port] only")
        return cls(parts.scheme, normal_name(parts.hostname), port or DEFAULT_PORTS[parts.scheme])

    @classmethod
    def serving(cls, scheme: str, host: str) -> WebOrigin:
        """The origin of a node reached over ``scheme`` with ``Host: host``
        (``ValueError`` for a ``Host`` that is no name or address)."""
        name, port = split_host(host)
        return cls(scheme, name, port or DEFAULT_PORTS.get(scheme, 80))

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        implied = DEFAULT_PORTS.get(self.scheme) == self.port
        return f"{self.scheme}://{host}" if implied else f"{self.scheme}://{host}:{self.port}"


#: ``Host`` headers parsed lately: a node is reached by a handful of names, and
#: parsing one (``ipaddress`` refusing a name, the name pattern) costs tens of
#: microseconds a request. A refusal is not kept: it costs its sender alone.
@functools.lru_cache(maxsize=1024)
def split_host(header: str) -> tuple[str, int | None]:
    """A ``Host`` header's name (lower case, without a final dot, an IPv6
    address without its brackets) and port; ``ValueError`` if it is neither
    a name nor an address."""
    text = header.strip()
    port: int | None = None
    if text.startswith("["):
        address, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{header!r} is not HOST[:PORT]")
        text, port_text = address, rest[1:]
    else:
        name, colon, port_text = text.rpartition(":")
        text = name if colon else text
        port_text = port_text if colon else ""
    if port_text:
        if not port_text.isdigit() or int(port_text) > 65535:
            raise ValueError(f"{header!r} is not HOST[:PORT]")
        port = int(port_text)
    name = normal_name(text)
    if not (is_address(name) or _NAME.fullmatch(name)):
        raise ValueError(f"{header!r} is not HOST[:PORT]")
    return name, port


@functools.lru_cache(maxsize=1024)
def is_address(name: str) -> bool:
    """Whether ``name`` is an IP address written out (no DNS answer can stand behind it)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback_name(name: str) -> bool:
    """``localhost`` and the names under it (RFC 6761): browsers answer them
    with loopback themselves, never asking DNS."""
    return name == "localhost" or name.endswith(".localhost")


def check_host_name(name: str) -> None:
    """``ValueError`` unless ``name`` is a host name or address without a port."""
    try:
        _, port = split_host(name)
    except ValueError:
        raise ValueError(f"{name!r} is not a host name") from None
    if port is not None:
        raise ValueError(f"{name!r}: give the name without a port (any port is the node's)")


def normal_name(name: str) -> str:
    """``name`` as names are compared: lower case, without a final dot."""
    return name.lower().removesuffix(".")
