"""A coordinator ``Worker`` on a ``ClusterClient``: the benches' worker of a scaled-out cluster.

Usage (bench/groups.py starts it): ``python bench/cluster_worker.py --map FILE
[--rotate R] --client-id ID --redis-url URL --prefix PREFIX [--concurrency 8]
[--lease 10] [--owner NAME] [--metrics-port PORT] [--home-only]``

It runs the demo handler (:mod:`forum.deploy.demo`: ``FORUM_SINK_URL``,
``FORUM_DEMO_WORK_MS``) as ``forum worker --handler`` does, on the cluster of
the map: its home group is where ``--client-id`` places it, and it calls each
group's member ``--rotate`` first (bench/groups.py says why). ``--home-only``
gives its client a map of its home group alone: it never looks in another
group (what stealing costs is the difference). It stays until
``forum worker`` takes a map (issue 30), which the benches then run instead.
SIGTERM or SIGINT drains it, as it does ``forum worker``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

import uvloop
from groups import rotated

from forum.coordinator.lens import Lens
from forum.coordinator.metrics import serve_metrics, worker_registry
from forum.coordinator.worker import Worker
from forum.deploy.demo import open_handler
from forum.node.client.cluster import ClusterClient
from forum.node.cluster.map import ClusterMap, load_map
from forum.node.core.space import Pattern


async def main(args: argparse.Namespace) -> None:
    cluster = rotated(load_map(args.map), args.rotate)
    home = ClusterClient(cluster, client_id=args.client_id).home[0]
    # Its node: the member --rotate of its home group, reached first.
    prefer = cluster.group(home).members[0]
    if args.home_only:
        # Its home group alone: the same client, which never looks elsewhere.
        cluster = ClusterMap(cluster.epoch, (cluster.group(home),))
    async with (
        ClusterClient(cluster, client_id=args.client_id, prefer=prefer) as space,
        Lens.from_url(args.redis_url) as lens,
        open_handler() as handler,
    ):
        worker = Worker(
            space,
            lens,
            Pattern(args.prefix.encode()),
            handler,
            concurrency=args.concurrency,
            lease=args.lease,
            owner=args.owner,
        )
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, worker.stop)
        async with contextlib.AsyncExitStack() as stack:
            if args.metrics_port is not None:
                registry = worker_registry(worker.stats)
                await stack.enter_async_context(
                    serve_metrics(registry, "127.0.0.1", args.metrics_port)
                )
            print(f"worker {worker.owner}: home {space.home}", file=sys.stderr, flush=True)
            await worker.run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--map", required=True, help="the cluster map file (TOML or JSON)")
    parser.add_argument("--rotate", type=int, default=0, help="call each group's member R first")
    parser.add_argument("--client-id", required=True, help="places the worker's home group")
    parser.add_argument("--redis-url", required=True, help="the Lens's Redis")
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--owner")
    parser.add_argument("--metrics-port", type=int)
    parser.add_argument(
        "--home-only", action="store_true", help="look in the home group only: never steal"
    )
    uvloop.run(main(parser.parse_args()))  # the loop `forum worker` runs on
