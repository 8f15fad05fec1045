"""The fenced example stores against a holder that stalled past its lease.

The Redis store sits beside the Lens and refuses any write whose claim is not
the live one, even before a newer holder wrote. The SQLite store cannot see
the Lens: it refuses a write older than one it stored, and no more (its
documented limit, checked here too).
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path

import pytest
from redis.asyncio import Redis

from examples.handlers import fenced_sqlite
from examples.handlers.fenced_redis import FencedRedisStore, StaleToken
from examples.handlers.fenced_sqlite import FencedSqliteStore
from forum.coordinator import Claim, ClaimLost, Job, Lens
from forum.node.client.remote import ForumClient
from forum.node.core.entries import EntryId
from tests.coordinator.harness import WorkerProcess, eventually, worker_processes
from tests.coordinator.process_handlers import STARTED
from tests.fixtures.nodes import NodeProcess

LEASE = 0.2


async def expired(lens: Lens, claim: Claim) -> None:
    """Wait, holding ``claim``, until Redis has let its lease run out."""
    await eventually(lambda: _gone(lens, claim.key), what=f"{claim.key}'s lease to run out")


async def _gone(lens: Lens, key: str) -> bool:
    async with Redis.from_url(lens.config.url) as client:
        return not await client.exists(lens.keys.claim(key))


async def test_redis_store_refuses_an_expired_claim_before_a_newer_holder_writes(
    lens: Lens, fenced: FencedRedisStore
) -> None:
    """t0: A claims k, stalls past its lease. t1: A's claim expires; nobody
    else holds k. t2: A writes -> refused. t3: B claims k. t4: A writes again
    -> refused, though B has not written. t5: B writes -> stored, once."""
    a = await lens.claim("k", owner="a", lease=LEASE)
    await expired(lens, a)
    with pytest.raises(StaleToken):
        await fenced.put("k", a.token, b"stale")
    b = await lens.claim("k", owner="b", lease=30)
    with pytest.raises(StaleToken):
        await fenced.put("k", a.token, b"stale")
    assert await fenced.get("k") is None
    await fenced.put("k", b.token, b"fresh")
    assert await fenced.get("k") == (b.token, b"fresh")
    assert await fenced.applied() == [("k", b.token)]


async def test_redis_store_refusal_is_a_lost_claim(lens: Lens, fenced: FencedRedisStore) -> None:
    """A refused write raises ``ClaimLost`` (what the worker counts as a lost
    claim rather than retrying), naming the key and the writer's token."""
    a = await lens.claim("k", owner="a", lease=LEASE)
    await expired(lens, a)
    with pytest.raises(ClaimLost) as refused:
        await fenced.put("k", a.token, b"stale")
    assert (refused.value.key, refused.value.token) == ("k", a.token)


async def test_redis_store_accepts_a_live_claim_and_its_repeats(
    lens: Lens, fenced: FencedRedisStore
) -> None:
    """A live claim's write is stored; the same holder repeating it (a lost
    reply) is accepted again and applied once; after complete() it is refused."""
    a = await lens.claim("k", owner="a", lease=30)
    await fenced.put("k", a.token, b"v")
    await fenced.put("k", a.token, b"v")
    assert await fenced.applied() == [("k", a.token)]
    await a.complete()
    with pytest.raises(StaleToken):
        await fenced.put("k", a.token, b"v")


async def test_redis_store_in_another_lens_namespace_sees_no_claim(
    redis_url: str, lens: Lens
) -> None:
    """The store reads the claim of the Lens whose namespace it was given."""
    claim = await lens.claim("k", owner="a", lease=30)
    async with FencedRedisStore.from_url(redis_url, lens_namespace="elsewhere") as store:
        with pytest.raises(StaleToken):
            await store.put("k", claim.token, b"v")


async def test_sqlite_store_refuses_only_after_a_newer_holder_wrote(
    lens: Lens, tmp_path: Path
) -> None:
    """The documented limit. t0: A claims k, stalls past its lease. t1: A
    writes -> stored (the store cannot see the Lens). t2: B claims k, writes
    -> stored, over A's. t3: A writes again -> refused."""
    a = await lens.claim("k", owner="a", lease=LEASE)
    await expired(lens, a)
    async with FencedSqliteStore(tmp_path / "results.db") as store:
        await store.put("k", a.token, b"stale")
        assert await store.get("k") == (a.token, b"stale")
        b = await lens.claim("k", owner="b", lease=30)
        await store.put("k", b.token, b"fresh")
        with pytest.raises(StaleToken):
            await store.put("k", a.token, b"stale")
        assert await store.get("k") == (b.token, b"fresh")
        assert await store.applied() == [("k", a.token), ("k", b.token)]


async def test_sqlite_handler_verifies_before_it_writes(lens: Lens, tmp_path: Path) -> None:
    """What narrows the SQLite store's window: the handler's ``verify()``
    refuses a claim that expired before the write, and nothing is stored."""
    a = await lens.claim("k", owner="a", lease=LEASE)
    await expired(lens, a)
    job = Job(b"job/k", EntryId("a", 1), "k", 1, a)
    async with FencedSqliteStore(tmp_path / "results.db") as store:
        with pytest.raises(ClaimLost):
            await fenced_sqlite.fenced_handler(store)(job)
        assert await store.get("k") is None
        await store.put("k", a.token + 1, b"next")  # the refusal left no transaction open


async def test_sqlite_store_verifies_with_its_write_lock_held(tmp_path: Path) -> None:
    """No wait for the write lock lies between verify() and the write: while
    verify() runs, another connection cannot begin a write."""
    path = tmp_path / "results.db"

    def begin_elsewhere() -> None:
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
        finally:
            other.close()

    async def verify() -> None:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await asyncio.to_thread(begin_elsewhere)

    async with FencedSqliteStore(path) as store:
        await store.put("k", 1, b"v", verify=verify)
        assert await store.get("k") == (1, b"v")
    await asyncio.to_thread(begin_elsewhere)  # and the lock is released after


async def test_sqlite_store_cancelled_in_verify_writes_nothing(tmp_path: Path) -> None:
    """A handler cancelled while verify() waits (the heartbeat found its claim
    lost) rolls the write back, and the store keeps working."""
    verifying = asyncio.Event()

    async def verify() -> None:
        verifying.set()
        await asyncio.Event().wait()

    async with FencedSqliteStore(tmp_path / "results.db") as store:
        put = asyncio.create_task(store.put("k", 1, b"v", verify=verify))
        await verifying.wait()
        put.cancel()
        with pytest.raises(asyncio.CancelledError):
            await put
        assert await store.get("k") is None
        await store.put("k", 2, b"w")
        assert await store.applied() == [("k", 2)]


@pytest.mark.slow
async def test_sigstopped_worker_stores_no_effect_with_its_expired_claim(
    forum_node: NodeProcess, redis_url: str, lens: Lens, fenced: FencedRedisStore, tmp_path: Path
) -> None:
    """t0: worker A (lease 1 s) runs job k: verify() passes; A is SIGSTOPped
    before its write. t1: A's claim expires in Redis; nobody else holds k.
    t2: SIGCONT: A's write, with the expired claim's token, reaches the store
    -> refused. t3: k's reservation ran out on the node meanwhile; A runs it
    again with a newer token -> stored. The effect is stored once, by the
    newer holder."""
    env = {"FORUM_EXAMPLE_REDIS_URL": redis_url}
    args = [
        "--node", forum_node.url, "--redis-url", redis_url, "--prefix", "job/",
        "--handler", "tests.coordinator.process_handlers:stop_before_first_write",
        "--take-wait", "0.5", "--lease", "1",
    ]  # fmt: skip
    async with ForumClient(forum_node.url) as space, worker_processes(tmp_path) as workers:
        a = WorkerProcess("a", tmp_path, args, env)
        workers.append(a)
        await a.start()
        # A first job warms the worker's connection and the store's script, so
        # that A's write after SIGCONT is one request, sent before anything else.
        warm = str(await space.write(b"job/warm"))
        await eventually(lambda: _stored(fenced, warm), timeout=20, what="the warm-up job")
        k = str(await space.write(b"job/k"))
        await eventually(lambda: _stopped(a.pid), timeout=20, what="A stopped before its write")
        [stale] = [int(row.split()[1]) for row in await _started(redis_url) if row.startswith(k)]
        await eventually(lambda: _gone(lens, k), what="A's claim to expire")
        a.resume()
        await eventually(lambda: _stored(fenced, k), timeout=20, what="k's rerun")
        assert await a.signal(signal.SIGTERM) == 0, a.log_text()
        result = await fenced.get(k)
        assert result is not None and result[0] > stale
        assert [row for row in await fenced.applied() if row[0] == k] == [(k, result[0])]


async def _stored(store: FencedRedisStore, key: str) -> bool:
    return await store.get(key) is not None


def _stopped(pid: int | None) -> bool:
    """Whether process ``pid`` is stopped (state ``T`` in /proc)."""
    if pid is None:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


async def _started(redis_url: str) -> list[str]:
    async with Redis.from_url(redis_url) as client:
        return [row.decode() for row in await client.lrange(STARTED, 0, -1)]
