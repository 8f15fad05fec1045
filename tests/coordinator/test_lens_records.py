"""What only the Lens (not the in-memory authority) must get right about job
records and scans: a namespace's scan lists its own keys only, whatever
glob characters the namespaces hold, and a refused record leaves Redis as it
was. (The shared behaviour is in test_authority_contract.py.)"""

from __future__ import annotations

import pytest
import redis

from forum.coordinator import ClaimLost, Lens
from tests.coordinator.harness import eventually
from tests.coordinator.test_authority_contract import _claim_when_free


async def test_a_scan_lists_its_own_namespace_only(redis_url: str) -> None:
    namespaces = ["a*", "a*:b", "ab", "a[b]?"]
    lenses = [Lens.from_url(redis_url, namespace=ns, shards=4) for ns in namespaces]
    try:
        for lens in lenses:
            for i in range(5):
                assert await lens.record_enqueued(f"{lens.keys.namespace}/{i}", {"t": "x"}, 60)
        for lens in lenses:
            found = {key async for key in lens.scan("task", count=3)}
            assert found == {f"{lens.keys.namespace}/{i}" for i in range(5)}
    finally:
        for lens in lenses:
            await lens.aclose()


async def test_a_stale_holders_record_is_refused_in_redis_and_changes_nothing(
    lens: Lens, redis_url: str
) -> None:
    """t0: A claims k (lease 0.2 s) and records "running". t1: A stalls past
    its lease; B claims k. t2: A, not knowing, records "done": refused by
    record.lua, and not a byte of Redis changed."""
    stale = await lens.claim("k", owner="a", lease=0.2)
    await lens.record(stale, {"state": "running"}, ttl=60)
    await eventually(lambda: stale.remaining() < 0, what="A's lease over")
    fresh = await _claim_when_free(lens, "k")
    with redis.Redis.from_url(redis_url) as r:
        before = {key: r.dump(key) for key in r.scan_iter()}
        with pytest.raises(ClaimLost, match="record was not written"):
            await lens.record(stale, {"state": "done", "result": b"stale"}, ttl=60)
        assert {key: r.dump(key) for key in r.scan_iter()} == before
    await lens.record(fresh, {"state": "done"}, ttl=60)


async def test_record_values_keep_every_byte_through_the_script(lens: Lens) -> None:
    """Fields travel to record.lua as one msgpack array (cmsgpack): any bytes,
    any size, and many fields, come back as written."""
    claim = await lens.claim("k", owner="a", lease=5)
    blob = bytes(range(256)) * 4096  # 1 MiB, every byte value
    fields: dict[str, bytes | str | int] = {f"f{i}": i for i in range(300)}
    fields |= {"result": blob, "empty": b"", "text": "ünï\x00code"}
    await lens.record(claim, fields, ttl=60)
    record = (await lens.inspect("k")).record
    assert record["result"] == blob and record["empty"] == b""
    assert record["text"] == "ünï\x00code".encode() and record["f299"] == b"299"
    assert len(record) == 300 + 3 + 1  # and the token
