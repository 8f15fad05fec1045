"""Child process for the compaction crash test: writes and takes, and
compacts all the while, on small segments, until killed. It prints
``w <payload>`` before a write, ``W <payload>`` once it returned, ``t
<payload>`` before a take of it, ``T <payload>`` once it returned. Run as
``python -m tests.node.compact_churner DIR SEED``."""

from __future__ import annotations

import asyncio
import os
import random
import sys

from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig


async def churn(forum: Forum, rng: random.Random) -> None:
    out = sys.stdout
    run = os.getpid()  # payloads are unique across runs
    n = 0
    live: list[bytes] = [t.payload for t in forum.list(Pattern(b""), limit=10**6).tuples]
    while True:
        batch = [b"c/%d/%d/" % (run, n + i) + b"x" * rng.randrange(300) for i in range(8)]
        n += len(batch)
        out.write("".join(f"w {p.decode()}\n" for p in batch))
        out.flush()
        await forum.write_many(batch)
        out.write("".join(f"W {p.decode()}\n" for p in batch))
        live.extend(batch)
        for _ in range(rng.randrange(10)):  # mostly more takes than writes: a churned log
            if not live:
                break
            payload = live.pop(rng.randrange(len(live)))
            out.write(f"t {payload.decode()}\n")
            out.flush()
            if await forum.take(Pattern(payload)) is not None:
                out.write(f"T {payload.decode()}\n")
        out.flush()


async def compact(forum: Forum, rng: random.Random) -> None:
    while True:
        await asyncio.sleep(rng.uniform(0, 0.02))
        await forum.compact(seal=rng.random() < 0.5)


async def main(directory: str, seed: int) -> None:
    rng = random.Random(seed)
    config = StrandConfig().with_storage(directory).with_segment_bytes(8192)
    forum = Forum(await Strand.open(config))
    await asyncio.gather(churn(forum, rng), compact(forum, random.Random(seed + 1)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
