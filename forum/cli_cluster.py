"""``forum cluster``: a local cluster of real processes
(:class:`forum.deploy.cluster.Cluster`), the demo workload run on it
(:mod:`forum.deploy.workload`), and its replica groups' map edited while it runs.

``forum cluster up --nodes 3 [--redis auto|URL] [--workers N] [--chaos]``
(``URL``: any Redis URL a worker takes, Sentinel's and Cluster's included)
starts one group of N nodes, no map, prints where everything is and a status
line until Ctrl-C, then stops it all. ``forum cluster up --groups G
--replicas R`` starts G replica groups of R nodes instead, placed by the map
it writes (``cluster-map.toml`` in ``--root``); ``forum cluster add-group``,
``drain-group ID`` and ``retire-group ID`` edit that map (epoch + 1), and the
running ``up`` starts an added group's nodes and stops a retired one's.
``forum cluster demo`` does what ``up`` does, puts ``--jobs`` jobs through
it and prints the history checker's verdict; it exits 1 when the verdict is
not valid.
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
from forum.deploy.cluster import (
    MAX_REPLICAS,
    Cluster,
    ClusterConfig,
    launcher_running,
    nodes_ready,
)
from forum.deploy.demo import WORK_MS_ENV
from forum.deploy.groups import MAP_FILE, add_group, drain_group, retire_group
from forum.deploy.processes import free_port
from forum.deploy.workload import run_demo
from forum.node.cluster.map import ClusterMap, load_map
from forum.node.core.errors import ClusterMapError


def add_cluster(parser: argparse.ArgumentParser) -> None:
    """The actions of ``forum cluster`` and their options."""
    parser.description = (
        "Start a local cluster: nodes wired as peers (one group, or replica groups "
        "placed by a cluster map), a Redis for the Lens, optional Toxiproxy links and "
        "workers. Ctrl-C stops everything. add-group, drain-group and retire-group "
        "edit a running cluster's map."
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up",
        help="start the cluster and show a live status line until Ctrl-C",
        epilog="examples:\n  forum cluster up --nodes 3 --workers 1\n"
        "  forum cluster up --groups 2 --replicas 3 --root ./cluster",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo = actions.add_parser(
        "demo",
        help="start a cluster, put jobs through it, and check the history",
        epilog="examples:\n  forum cluster demo --jobs 2000\n"
        "  forum cluster demo --groups 2 --replicas 2",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for sub, workers in ((up, 0), (demo, 1)):
        add = sub.add_argument
        add("--nodes", type=int, metavar="N", help="one group of N nodes, no map (default 3)")
        add(
            "--groups",
            type=int,
            metavar="G",
            help=f"G replica groups placed by a cluster map ({MAP_FILE} in --root; default 1)",
        )
        add("--replicas", type=int, metavar="R", help="nodes per group, with a map (default 3)")
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
    root_help = "the cluster's directory, as `forum cluster up` printed it"
    add_group = actions.add_parser(
        "add-group",
        help="add a replica group to a running cluster of groups (the map's epoch + 1)",
        epilog="example:\n  forum cluster add-group --root ./cluster",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_group.add_argument("--root", type=Path, required=True, help=root_help)
    add_group.add_argument(
        "--replicas",
        type=int,
        metavar="R",
        help="its members (default: as many as the first group's)",
    )
    add_group.set_defaults(func=_add_group)
    for name, func, summary in (
        ("drain-group", _drain_group, "stop new writes to a group; its backlog drains in place"),
        ("retire-group", _retire_group, "retire a drained group once it holds no tuples"),
    ):
        sub = actions.add_parser(name, help=summary)
        sub.add_argument("id", metavar="ID", help="the group's id (g1, g2, ...)")
        sub.add_argument("--root", type=Path, required=True, help=root_help)
        sub.set_defaults(func=func)


def _config(args: argparse.Namespace, **extra: object) -> ClusterConfig:
    """The cluster the options ask for; a :class:`UsageError` before anything
    starts when ``ClusterConfig`` refuses them."""
    if args.nodes is not None and (args.groups is not None or args.replicas is not None):
        raise UsageError(
            "--nodes N is one group of N without a map; --groups/--replicas make groups"
            " with a map: give one or the other"
        )
    mapped = args.groups is not None or args.replicas is not None
    if args.groups is not None and args.groups < 1:
        raise UsageError("--groups must be 1 or more")
    try:
        return dataclasses.replace(
            ClusterConfig(),
            nodes=3 if args.nodes is None else args.nodes,
            groups=(args.groups or 1) if mapped else 0,
            replicas=3 if args.replicas is None else args.replicas,
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
            for change in await cluster.follow_map():
                print(f"\n{change}", file=sys.stderr, flush=True)
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


async def _add_group(args: argparse.Namespace) -> int:
    path = _map_path(args.root)
    if not launcher_running(args.root):
        raise UsageError(
            f"no `forum cluster up --groups` runs in {args.root}: it starts the new group's nodes"
        )
    replicas = args.replicas or len(_load(path).groups[0].members)
    if not 1 <= replicas <= MAX_REPLICAS:
        raise UsageError(f"--replicas must be 1 to {MAX_REPLICAS}")
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(replicas)]
    try:
        group = add_group(path, urls)
    except ClusterMapError as exc:
        raise UsageError(str(exc)) from None
    epoch = _load(path).epoch
    print(f"group {group.id} added to {path} (epoch {epoch}): {' '.join(urls)}", flush=True)
    if not await nodes_ready(urls):
        raise UsageError(
            f"group {group.id} is in the map but its nodes did not answer:"
            f" see their logs in {args.root}/{group.id}-*"
        )
    print(f"group {group.id} ready; new writes of its slots go to it now")
    return 0


async def _drain_group(args: argparse.Namespace) -> int:
    path = _map_path(args.root)
    try:
        cluster = drain_group(path, args.id)
    except ClusterMapError as exc:
        raise UsageError(str(exc)) from None
    print(f"group {args.id} draining (epoch {cluster.epoch}): no new writes; its backlog is served")
    return 0


async def _retire_group(args: argparse.Namespace) -> int:
    path = _map_path(args.root)
    try:
        cluster = await retire_group(path, args.id)
    except ClusterMapError as exc:
        raise UsageError(str(exc)) from None
    print(f"group {args.id} retired (epoch {cluster.epoch}); the launcher stops its nodes")
    return 0


def _map_path(root: Path) -> Path:
    path = root / MAP_FILE
    if not path.is_file():
        raise UsageError(
            f"no {MAP_FILE} in {root}: groups are made by `forum cluster up --groups G --root DIR`"
        )
    return path


def _load(path: Path) -> ClusterMap:
    try:
        return load_map(path)
    except ClusterMapError as exc:
        raise UsageError(str(exc)) from None
