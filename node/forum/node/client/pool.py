"""Calling one of several nodes: :class:`NodePool` fails over from a
node that does not answer to the next.

Any node of a cluster takes any write (replication carries it to the
others), so a producer needs one that answers. The pool keeps one
``ForumClient`` per URL, opened on first use, and sends each call to the
node that answered last (sticky: no round robin, so one producer's writes
stay in one node's order). On ``NodeUnavailable`` (refused, reset, timed
out) it tries the next URL, around the list once; a node's refusal
(``NodeRejected``: bad input, a full limited prefix) is an answer, raised
as it is.

A write whose answer was lost may have been made on the node that failed:
trying the next node then writes the job twice, on two nodes. The job key
(the write's ``key``, and the claim key) keeps that one job: the second copy
is turned away by the Lens (docs/scheduling.md, "Dedup at write").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from forum.node.client.remote import ForumClient
from forum.node.core.errors import NodeUnavailable
from forum.node.core.resource import AsyncResource
from forum.node.core.urls import node_url

log = logging.getLogger(__name__)

T = TypeVar("T")


def node_urls(nodes: str | Sequence[str]) -> tuple[str, ...]:
    """``nodes`` (one URL, a comma-separated list, or a sequence) as checked
    URLs; ``ValueError`` (one line) for a bad one or none."""
    listed = nodes.split(",") if isinstance(nodes, str) else list(nodes)
    urls = tuple(node_url(url.strip()) for url in listed if url.strip())
    if not urls:
        raise ValueError("no node URL given; give one like http://127.0.0.1:7000")
    return urls


class NodePool(AsyncResource):
    """Clients of ``urls``, used one at a time, failing over in order."""

    def __init__(self, urls: Sequence[str], token: str | None = None) -> None:
        self.urls = node_urls(urls)
        self._token = token
        self._clients: dict[int, ForumClient] = {}
        #: The index of the node that answered last.
        self._current = 0

    @property
    def current(self) -> ForumClient:
        """The client of the node that answered last (the first, at first)."""
        return self._client(self._current)

    def _client(self, index: int) -> ForumClient:
        client = self._clients.get(index)
        if client is None:
            client = self._clients[index] = ForumClient(self.urls[index], self._token)
        return client

    async def call(
        self, operation: Callable[[ForumClient], Awaitable[T]], *, skip_current: bool = False
    ) -> T:
        """``operation(client)`` on the node that answered last, else on each
        next one; the last ``NodeUnavailable`` once none answered.
        ``skip_current``: the caller just had it fail there; start at the next."""
        failure: NodeUnavailable | None = None
        for step in range(1 if skip_current else 0, len(self.urls)):
            index = (self._current + step) % len(self.urls)
            try:
                result = await operation(self._client(index))
            except NodeUnavailable as exc:
                log.warning("node %s is unavailable (%s); trying the next", self.urls[index], exc)
                failure = exc
                continue
            self._current = index
            return result
        if failure is None:  # skip_current with one node: nothing else to try
            raise NodeUnavailable(self.urls[self._current], "no other node to try")
        raise failure

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
