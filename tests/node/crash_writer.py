"""Child process for the crash tests: writes (and sometimes takes) forever,
printing ``W <id> <payload>`` once a write returned, ``T <payload>`` once a
take returned. Run as ``python -m tests.node.crash_writer DIR [SEGMENT_BYTES
FSYNC CHECKPOINT_INTERVAL]``."""

from __future__ import annotations

import asyncio
import os
import sys

from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig


async def main(directory: str, *options: str) -> None:
    config = StrandConfig().with_storage(directory)
    if options:
        segment_bytes, fsync, checkpoint = options
        config = config.with_segment_bytes(int(segment_bytes)).with_fsync(fsync)  # type: ignore[arg-type]
        config = config.with_checkpoint_interval(float(checkpoint))
    forum = Forum(await Strand.open(config))
    out = sys.stdout
    run = os.getpid()  # payloads are unique across runs
    n = 0
    while True:
        batch = [b"crash/%d/%d" % (run, n + i) for i in range(8)]
        ids = await asyncio.gather(*(forum.write(p) for p in batch))
        for entry_id, payload in zip(ids, batch, strict=True):
            out.write(f"W {entry_id} {payload.decode()}\n")
        taken = await forum.take(Pattern(b"crash/"))
        if taken is not None:
            out.write(f"T {taken.decode()}\n")
        out.flush()
        n += len(batch)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
