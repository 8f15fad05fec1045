"""A work queue on one in-process Forum: producers write jobs, workers take them.

Run: ``python examples/work_queue.py [--jobs N] [--workers N] [--data-dir PATH]``.
Prints a progress line and, at the end, a check that every job was done once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time

from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--data-dir", default=None, help="default: a temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = StrandConfig().with_storage(args.data_dir or tmp)
        async with Forum(await Strand.open(cfg)) as forum:
            done: list[bytes] = []
            started = time.perf_counter()

            async def produce() -> None:
                for start in range(0, args.jobs, 500):
                    end = min(args.jobs, start + 500)
                    await forum.write_many([b"job/%d" % i for i in range(start, end)])

            async def work() -> None:
                # A blocking take: no polling; a second of quiet means the queue is done.
                while (job := await forum.take(Pattern(b"job/"), timeout=1.0)) is not None:
                    done.append(job)

            async def progress() -> None:
                while True:
                    rate = len(done) / max(time.perf_counter() - started, 1e-9)
                    print(
                        f"\rdone {len(done):>7}/{args.jobs}  {rate:>8.0f} jobs/s",
                        end="",
                        file=sys.stderr,
                        flush=True,
                    )
                    await asyncio.sleep(0.2)

            ticker = asyncio.create_task(progress())
            async with asyncio.TaskGroup() as group:
                group.create_task(produce())
                for _ in range(args.workers):
                    group.create_task(work())
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
            elapsed = time.perf_counter() - started
            unique = len(set(done))
            print(
                f"\rdone {len(done)}/{args.jobs} jobs in {elapsed:.2f} s "
                f"({len(done) / elapsed:.0f} jobs/s, fsync always); "
                f"duplicates {len(done) - unique}, missing {args.jobs - unique}"
            )
            return 0 if unique == len(done) == args.jobs else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
