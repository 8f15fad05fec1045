"""``forum cluster up`` and ``forum cluster demo``: a local cluster of real
processes (:class:`forum.deploy.cluster.Cluster`), and the demo workload run on it
(:mod:`forum.deploy.workload`).

``forum cluster up --nodes 3 [--redis auto|URL] [--workers N] [--chaos]``
(``URL``: any Redis URL a worker takes, Sentinel's and Cluster's included)
starts the cluster, prints where everything is and a status line until
Ctrl-C, then stops it all. ``forum cluster demo`` does the same, puts
``--jobs`` jobs through it and prints the history checker's verdict; it
exits 1 when the verdict is not valid.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from forum.cli_args import UsageError
from forum.deploy.cluster import Cluster, ClusterConfig
from forum.deploy.demo import WORK_MS_ENV
from forum.deploy.workload import run_demo


def add_cluster(parser: argparse.ArgumentParser) -> None:
    """The actions of ``forum cluster`` and their options."""
    parser.description = (
        "Start a local cluster: nodes wired as peers, a Redis for the Lens, "
        "optional Toxiproxy links and workers. Ctrl-C stops everything."
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up",
        help="start the cluster and show a live status line until Ctrl-C",
        epilog="example:\n  forum cluster up --nodes 3 --workers 1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo = actions.add_parser(
        "demo",
        help="start a cluster, put jobs through it, and check the history",
        epilog="example:\n  forum cluster demo --jobs 2000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for sub, workers in ((up, 0), (demo, 1)):
        add = sub.add_argument
        add("--nodes", type=int, default=3, help="how many nodes (default 3)")
        add("--workers", type=int, default=workers, help=f"workers per node (default {workers})")
        add(
            "--redis",
            default="auto",
            help="'auto' starts a redis-server; or the URL of one the workers take: "
            "redis://host:port/db, redis+sentinel://host:port[,...]/name, "
            "redis+cluster://host:port[,...]/",
        )
        add("--chaos", action="store_true", help="route links through Toxiproxy")
        add("--root", type=Path, help="where data and logs go (default: a temporary dir)")
        add("--concurrency", type=int, default=8, help="handlers per worker (default 8)")
    up.set_defaults(func=_up)
    demo.add_argument("--jobs", type=int, default=2000, help="jobs to write (default 2000)")
    demo.add_argument("--deadline", type=float, default=120, help="seconds to wait (default 120)")
    demo.add_argument("--work-ms", type=float, default=5, help="each job's work (default 5 ms)")
    demo.set_defaults(func=_demo)


def _config(args: argparse.Namespace, **extra: object) -> ClusterConfig:
    """The cluster the options ask for; a :class:`UsageError` before anything
    starts when ``ClusterConfig`` refuses them."""
    try:
        return dataclasses.replace(
            ClusterConfig(),
            nodes=args.nodes,
            workers=args.workers,
            redis=args.redis,
            chaos=args.chaos,
            root=args.root,
            concurrency=args.concurrency,
            **extra,  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


async def _up(args: argparse.Namespace) -> int:
    async with _until_signalled() as stopping, Cluster(_config(args)) as cluster:
        print(cluster.describe(), flush=True)
        while not stopping.is_set():
            print(f"\r{await cluster.status_line()}", end="", file=sys.stderr, flush=True)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):
                    await stopping.wait()
        print("\nstopping", file=sys.stderr)
    return 0


async def _demo(args: argparse.Namespace) -> int:
    cfg = _config(args, worker_env={WORK_MS_ENV: str(args.work_ms)})
    verdict = await run_demo(cfg, args.jobs, args.deadline)
    return 0 if verdict.valid else 1


@contextlib.asynccontextmanager
async def _until_signalled() -> AsyncIterator[asyncio.Event]:
    """An event set on SIGINT or SIGTERM, for the length of the block."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    try:
        yield stopping
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
