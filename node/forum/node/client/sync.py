"""``SyncForumClient``: the client for scripts that are not async.

::

    with SyncForumClient("http://127.0.0.1:7070") as space:
        space.write(b"job-1")
        print(space.take(Pattern(b"job-"), timeout=5))

It runs a :class:`~forum.node.client.remote.ForumClient` on an event loop of its own (one
loop for the client's life, so its stream, or its HTTP connection pool with
``transport="http"``, is reused). Do not use it
from inside a running event loop: use ``ForumClient`` there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

from forum.node.api.status import NodeStatus
from forum.node.client.remote import ForumClient
from forum.node.core.entries import EntryId, Tuple
from forum.node.core.space import ListPage, Pattern
from forum.node.core.write_options import WriteOptions, unknown_options

T = TypeVar("T")


class SyncForumClient:
    """The methods of :class:`ForumClient`, blocking. Close it (or use ``with``)."""

    def __init__(self, url: str, token: str | None = None, **options: Any) -> None:
        self._runner = asyncio.Runner()
        self._client = ForumClient(url, token, **options)
        self.url = self._client.url
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections and the loop. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._runner.run(self._client.aclose())
        finally:
            self._runner.close()

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(call)

    def write(self, payload: bytes, **options: Unpack[WriteOptions]) -> EntryId:
        unknown_options(options, "SyncForumClient.write")
        return self._run(self._client.write(payload, **options))

    def write_many(
        self,
        payloads: Sequence[bytes],
        *,
        keys: Sequence[bytes | str] | None = None,
        **options: Unpack[WriteOptions],
    ) -> list[EntryId]:
        unknown_options(options, "SyncForumClient.write_many")
        return self._run(self._client.write_many(payloads, keys=keys, **options))

    def pause(self, prefix: bytes) -> EntryId:
        return self._run(self._client.pause(prefix))

    def resume(self, prefix: bytes) -> int:
        return self._run(self._client.resume(prefix))

    def paused(self) -> list[bytes]:
        return self._run(self._client.paused())

    def read(self, pattern: Pattern) -> bytes | None:
        return self._run(self._client.read(pattern))

    def read_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None:
        return self._run(self._client.read_entry(pattern, timeout))

    def take(self, pattern: Pattern, timeout: float | None = None) -> bytes | None:
        return self._run(self._client.take(pattern, timeout))

    def take_entry(self, pattern: Pattern, timeout: float | None = None) -> Tuple | None:
        return self._run(self._client.take_entry(pattern, timeout))

    def take_many(self, pattern: Pattern, limit: int, timeout: float | None = None) -> list[Tuple]:
        return self._run(self._client.take_many(pattern, limit, timeout))

    def count(self, pattern: Pattern) -> int:
        return self._run(self._client.count(pattern))

    def list(self, pattern: Pattern, cursor: int = 0, limit: int = 100) -> ListPage:
        return self._run(self._client.list(pattern, cursor, limit))

    def status(self) -> NodeStatus:
        return self._run(self._client.status())
