"""A typed async client of Toxiproxy's HTTP API (aiohttp).

Why not the ``toxiproxy-python`` package: its calls are blocking ``requests``
calls (they would stall the event loop the cluster runs on), it keeps the
server's host and port in class attributes (one server per process), and it is
untyped. This is a thin layer over Toxiproxy's documented API.

Partitions between nodes use one proxy per *directed* link::

    links = await toxiproxy.links({"a": a_addr, "b": b_addr, "c": c_addr})
    # links["a", "b"] is how a reaches b: listen on a free port, upstream b
    await toxiproxy.disable(links["a", "b"].name)    # a can no longer reach b
    async with toxiproxy.partition(links, {"a"}, {"b", "c"}): ...

A disabled proxy refuses new connections and closes open ones, which is what
a node sees when a peer's host is cut off and resets its connections.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

Link = tuple[str, str]


class ToxiproxyError(Exception):
    """The Toxiproxy API answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"toxiproxy: HTTP {status}: {message}")
        self.status = status


@dataclass(frozen=True, slots=True)
class Proxy:
    """One proxy: it listens on ``listen`` (``host:port``) and forwards to ``upstream``."""

    name: str
    listen: str
    upstream: str
    enabled: bool

    @property
    def url(self) -> str:
        """The proxy's address as an http URL (what a node is given as a peer)."""
        return f"http://{self.listen}"

    @classmethod
    def from_api(cls, document: Mapping[str, Any]) -> Proxy:
        return cls(
            name=str(document["name"]),
            listen=str(document["listen"]),
            upstream=str(document["upstream"]),
            enabled=bool(document["enabled"]),
        )


def link_name(source: str, target: str) -> str:
    """The proxy name of the link from ``source`` to ``target``."""
    return f"{source}_to_{target}"


class Toxiproxy:
    """An async client of one Toxiproxy server's HTTP API."""

    def __init__(self, api_url: str, session: aiohttp.ClientSession) -> None:
        self.api_url = api_url.rstrip("/")
        self._session = session

    async def version(self) -> str:
        return str(await self._call("GET", "/version"))

    async def proxies(self) -> dict[str, Proxy]:
        document = await self._call("GET", "/proxies")
        return {name: Proxy.from_api(p) for name, p in document.items()}

    async def create(self, name: str, upstream: str, listen: str = "127.0.0.1:0") -> Proxy:
        """A new enabled proxy; ``listen`` port 0 lets Toxiproxy pick a free port."""
        body = {"name": name, "upstream": upstream, "listen": listen, "enabled": True}
        return Proxy.from_api(await self._call("POST", "/proxies", body))

    async def links(self, upstreams: Mapping[str, str]) -> dict[Link, Proxy]:
        """One proxy per directed link between the named ``host:port`` upstreams.

        ``result[a, b]`` is the proxy ``a`` dials to reach ``b``.
        """
        made: dict[Link, Proxy] = {}
        for source in upstreams:
            for target, upstream in upstreams.items():
                if source != target:
                    made[source, target] = await self.create(link_name(source, target), upstream)
        return made

    async def set_upstream(self, name: str, upstream: str) -> Proxy:
        """Point the proxy at another ``host:port`` (open connections are cut)."""
        return Proxy.from_api(await self._call("POST", f"/proxies/{name}", {"upstream": upstream}))

    async def set_enabled(self, name: str, enabled: bool) -> Proxy:
        document = await self._call("POST", f"/proxies/{name}", {"enabled": enabled})
        return Proxy.from_api(document)

    async def disable(self, name: str) -> Proxy:
        """Refuse new connections and cut the open ones."""
        return await self.set_enabled(name, False)

    async def enable(self, name: str) -> Proxy:
        return await self.set_enabled(name, True)

    @contextlib.asynccontextmanager
    async def down(self, *names: str) -> AsyncIterator[None]:
        """The named proxies disabled for the block, enabled again after it."""
        for name in names:
            await self.disable(name)
        try:
            yield
        finally:
            for name in names:
                await self.enable(name)

    def partition(
        self, links: Mapping[Link, Proxy], side: Collection[str], other: Collection[str]
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Cut every link between ``side`` and ``other``, both ways, for the block."""
        cut = [
            proxy.name
            for (source, target), proxy in links.items()
            if (source in side and target in other) or (source in other and target in side)
        ]
        return self.down(*cut)

    async def add_toxic(
        self,
        proxy: str,
        kind: str,
        attributes: Mapping[str, Any],
        *,
        stream: str = "downstream",
        toxicity: float = 1.0,
        name: str | None = None,
    ) -> str:
        """Add a toxic (``latency``, ``timeout``, ``reset_peer``, ``bandwidth``, ...);
        returns its name."""
        body = {
            "name": name or f"{kind}_{stream}",
            "type": kind,
            "stream": stream,
            "toxicity": toxicity,
            "attributes": dict(attributes),
        }
        document = await self._call("POST", f"/proxies/{proxy}/toxics", body)
        return str(document["name"])

    async def remove_toxic(self, proxy: str, toxic: str) -> None:
        await self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic}")

    async def destroy(self, name: str) -> None:
        await self._call("DELETE", f"/proxies/{name}")

    async def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        await self._call("POST", "/reset")

    async def destroy_all(self) -> None:
        for name in await self.proxies():
            await self.destroy(name)

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        async with self._session.request(method, self.api_url + path, json=body) as response:
            text = await response.text()
            if response.status >= 400:
                raise ToxiproxyError(response.status, text.strip())
            if not text or response.content_type != "application/json":
                return text
            return await response.json()
