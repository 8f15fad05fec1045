"""Enqueue thumbnails and wait for them: the thumbnails app's producer.

Run: ``python -m examples.thumbnails.produce [--images N] [--size S]``
(the node and Redis: ``$FORUM_NODE``, ``$FORUM_REDIS_URL``, as the app says).
Prints one line per thumbnail, then a summary; exits 1 unless every one is done.

Each job's key is ``thumb:<image id>:<size>``: run the producer twice and
the second run enqueues nothing new (the same key is the same job, done
once); it only collects the results.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from examples.thumbnails.app import app, thumbnail
from forum import JobFailed, TaskError


async def produce(images: int, size: int, timeout: float) -> int:
    """Enqueue ``images`` thumbnails, print their results; how many failed."""
    async with app:
        handles = [
            await thumbnail.enqueue(image_id=i, size=size, _key=f"thumb:{i}:{size}")
            for i in range(images)
        ]
        failed = 0
        for handle in handles:
            try:
                result = await handle.result(timeout=timeout)
            except JobFailed as exc:
                failed += 1
                print(f"{handle.key}: dead: {exc.error}")
            except TaskError as exc:  # expired, cancelled, timed out
                failed += 1
                print(f"{handle.key}: {exc}")
            else:
                print(f"{handle.key}: {result['size']}x{result['size']} {result['sha256'][:16]}")
    print(f"{images} thumbnails: {images - failed} done, {failed} failed")
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--images", type=int, default=20, help="how many (default 20)")
    parser.add_argument("--size", type=int, default=16, help="the side, 1 to 64 (default 16)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per result")
    args = parser.parse_args()
    failed = asyncio.run(produce(args.images, args.size, args.timeout))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
