"""Peers in one process: a :class:`PeerTransport` with no sockets, for tests.

A :class:`MemoryNetwork` maps URLs to running replications; each node's
:class:`MemoryTransport` calls the others through it. Only the hop is
simulated: requests are signed and checked, answered by the very code the
aiohttp routes run (:func:`forum.replication.routes.serve`), and their errors come
back as the same ``PeerError``\\ s, retried the same way (the contract tests
in ``tests/replication/test_transport_contract.py`` hold both transports to
that). So anti-entropy and push logic can be tested in milliseconds::

    network = MemoryNetwork()
    transport = MemoryTransport(network, auth, config, caller="http://a.memory:1")
    replicator = Replicator(
        forum=..., me=Member(origin, "http://a.memory:1"), transport=transport, ...
    )
    network.attach("http://a.memory:1", Replication(replicator, auth))

``network.cut(url)`` partitions a node off (calls to it, and from its
transport, fail with ``PeerUnavailable``) until ``network.heal(url)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from forum.node.http.bodies import ApiProblem
from forum.replication.auth import ClusterAuth
from forum.replication.clocks import ClockSamples
from forum.replication.config import ReplicationConfig
from forum.replication.errors import PeerTimeout, PeerUnavailable
from forum.replication.routes import Replication, Request, serve
from forum.replication.transport import SignedTransport


class MemoryNetwork:
    """Which replication answers at which URL, and which URLs are cut off."""

    def __init__(self) -> None:
        self._nodes: dict[str, Replication | None] = {}
        self._cut: set[str] = set()

    def attach(self, url: str, replication: Replication | None) -> None:
        """Answer calls to ``url`` with ``replication`` (``None``: a node whose
        replication is not running, which answers 503)."""
        self._nodes[url.rstrip("/")] = replication

    def detach(self, url: str) -> None:
        self._nodes.pop(url.rstrip("/"), None)

    def cut(self, url: str) -> None:
        self._cut.add(url.rstrip("/"))

    def heal(self, url: str) -> None:
        self._cut.discard(url.rstrip("/"))

    def reach(self, url: str, caller: str | None = None) -> Replication | None:
        """The replication at ``url``, called from ``caller`` (a URL, or ``None``:
        from outside); ``PeerUnavailable`` if nothing answers there or either is cut off."""
        url = url.rstrip("/")
        if url in self._cut or url not in self._nodes:
            raise PeerUnavailable(url, "connection refused (no node at this URL in memory)")
        if caller is not None and caller.rstrip("/") in self._cut:
            raise PeerUnavailable(url, "no route from a node that is cut off")
        return self._nodes[url]


class MemoryTransport(SignedTransport):
    """:class:`~forum.replication.transport.PeerTransport` over a :class:`MemoryNetwork`,
    for the node at ``caller`` (its calls fail while it is cut off)."""

    def __init__(
        self,
        network: MemoryNetwork,
        auth: ClusterAuth,
        config: ReplicationConfig,
        *,
        caller: str | None = None,
        clocks: ClockSamples | None = None,
    ) -> None:
        super().__init__(auth, config, clocks)
        self._network = network
        self._caller = caller
        self._request_timeout = config.request_timeout

    async def _exchange(
        self, peer: str, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, Mapping[str, str], bytes]:
        replication = self._network.reach(peer, self._caller)
        try:
            async with asyncio.timeout(self._request_timeout):
                answer = await serve(replication, Request(method, path, headers, body))
        except TimeoutError as exc:
            raise PeerTimeout(peer, "no answer in time") from exc
        except ApiProblem as problem:
            return problem.status, problem.headers, (problem.text or "").encode()
        return 200, answer.headers, answer.body
