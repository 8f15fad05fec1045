"""A node's base URL, checked: the one rule for every URL a user gives for a
node (``--node``, a cluster map's members, ``App(nodes=...)``)."""

from __future__ import annotations

from urllib.parse import urlsplit


def node_url(url: str) -> str:
    """``url`` without a trailing slash, if it is a node's base URL
    (``http(s)://host[:port]``); ``ValueError`` saying what is wrong otherwise."""
    example = "like http://127.0.0.1:7070"
    try:
        parts = urlsplit(url)
        port = parts.port  # a port out of range or not a number raises
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a node URL ({exc}); give one {example}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r} has no http:// or https:// scheme; give one {example}")
    if not parts.hostname:
        raise ValueError(f"{url!r} has no host; give one {example}")
    if port is None and parts.netloc.endswith(":"):
        raise ValueError(f"{url!r} has an empty port; give one {example}")
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r} has a query or fragment; give one {example}")
    return url.rstrip("/")
