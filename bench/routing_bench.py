"""What routing costs a producer: a keyed write by ClusterClient against one by ForumClient.

Usage: ``python bench/routing_bench.py [--writes 3000] [--rounds 7]
[--groups 3] [--profile PATH] [--out PATH]``

One ``forum serve`` (``--fsync never``: the client's CPU is measured, not
the disk), started with a map of ``--groups`` groups of which its own, ``g1``,
is the one it serves; the other groups' members are addresses nothing
listens on, never called. The keys are the first ``--writes`` of
``job-0``, ``job-1``, ... whose slot ``g1`` owns, so both clients write the
same payloads, with the same keys, to the same node, one write in flight
(a producer's loop), and what differs is the routing: the slot, its owner
group, the group's pool and the map's checks. The two take turns
(``--rounds``, which goes first alternating), each on its own client made
once and warmed before the first round; this process's CPU
(``time.process_time``) per write is kept, and the medians compared
(issue 30's target: ClusterClient <= 1.05x ForumClient). A third side
takes turns with them: the ForumClient's write after the key's slot and its
owner group (``ClusterMap.owner``, cached per slot), the lookup a routed
write makes: what routing costs apart from the client's layers.

``--profile PATH`` runs one more round of each under cProfile after the
timed ones (profiled rounds are not timed) and writes the ClusterClient
round's statistics to PATH (``pstats``), printing where its time goes beyond
the ForumClient's: the functions of ``forum.node.cluster`` and
``forum.node.client.cluster``/``pool`` by own time.

Writes JSON (``bench/results/routing_bench.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvloop
from groups import owned_keys
from http_bench import forum_node, free_port

from forum.node.client.cluster import ClusterClient
from forum.node.client.remote import ForumClient
from forum.node.cluster.map import ClusterMap, Group
from forum.node.cluster.slots import slot_of

ROOT = Path(__file__).resolve().parent.parent
#: The modules whose functions are routing's (the rest is the ForumClient's, on both sides).
ROUTING_MODULES = (
    "forum/node/cluster/",
    "forum/node/client/cluster.py",
    "forum/node/client/pool.py",
)

Write = Callable[[bytes, str], Awaitable[object]]


async def round_of(write: Write, keys: list[str]) -> float:
    """This process's CPU seconds per write over one write per key, one at a time."""
    started = time.process_time()
    for key in keys:
        await write(key.encode() + b"x" * 60, key)
    return (time.process_time() - started) / len(keys)


async def main(args: argparse.Namespace) -> dict[str, object]:
    load_average = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="forum-routing-") as tmp:
        root = Path(tmp)
        port = free_port()
        cluster = map_for(f"http://127.0.0.1:{port}", args.groups)
        map_path = root / "cluster-map.json"
        map_path.write_text(json.dumps(cluster.to_document()))
        node = forum_node(root / "node", "never", port=port, args=("--cluster-map", str(map_path)))
        async with contextlib.AsyncExitStack() as stack:
            url, _ = await stack.enter_async_context(node)
            keys = owned_keys(cluster, "g1", args.writes)
            direct = await stack.enter_async_context(ForumClient(url))
            routed = await stack.enter_async_context(ClusterClient(cluster, client_id="producer"))

            async def direct_write(payload: bytes, key: str) -> object:
                return await direct.write(payload, key=key)

            async def routed_write(payload: bytes, key: str) -> object:
                return await routed.write(payload, key=key)

            async def owner_write(payload: bytes, key: str) -> object:
                cluster.owner(slot_of(key))
                return await direct.write(payload, key=key)

            sides: dict[str, Write] = {
                "forum_client": direct_write,
                "cluster_client": routed_write,
                "forum_client_and_owner": owner_write,
            }
            for write in sides.values():  # warm: connections open, code paths taken
                await round_of(write, keys[:200])
            per_write: dict[str, list[float]] = {name: [] for name in sides}
            for r in range(args.rounds):
                order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                for name in order:
                    per_write[name].append(await round_of(sides[name], keys))
                    await direct.compact()  # the next round starts from a compacted Strand
            two = {name: sides[name] for name in ("forum_client", "cluster_client")}
            profile = await profiled(two, keys, args.profile) if args.profile else None
    medians = {name: statistics.median(values) for name, values in per_write.items()}
    ratio = medians["cluster_client"] / medians["forum_client"]
    return {
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": load_average,
                    "load_average_at_end": os.getloadavg()},
        "writes_per_round": args.writes,
        "rounds": args.rounds,
        "groups_in_map": args.groups,
        "client_ms_per_write": {n: [1000 * v for v in vs] for n, vs in per_write.items()},
        "median_client_ms_per_write": {name: 1000 * v for name, v in medians.items()},
        "ratio": ratio,
        "target_met": ratio <= 1.05,
        "profile": profile,
    }  # fmt: skip


def map_for(url: str, groups: int) -> ClusterMap:
    """``g1`` of the node at ``url``; ``g2``.. of members nothing listens on."""
    others = [Group(f"g{g + 1}", (f"http://127.0.0.1:{g}",)) for g in range(1, groups)]
    return ClusterMap(1, (Group("g1", (url,)), *others))


async def profiled(sides: dict[str, Write], keys: list[str], path: Path) -> dict[str, object]:
    """One more round of each side under cProfile; the ClusterClient's
    statistics to ``path``, and its routing functions' own time, per write."""
    found: dict[str, object] = {}
    for name, write in sides.items():
        profiler = cProfile.Profile()
        profiler.enable()
        await round_of(write, keys)
        profiler.disable()
        stats = pstats.Stats(profiler, stream=io.StringIO())
        total = stats.total_tt  # type: ignore[attr-defined]
        found[f"{name}_profiled_ms_per_write"] = 1000 * total / len(keys)
        if name == "cluster_client":
            path.parent.mkdir(parents=True, exist_ok=True)
            stats.dump_stats(path)
            routing = []
            for (file, line, function), row in stats.stats.items():  # type: ignore[attr-defined]
                if any(m in file for m in ROUTING_MODULES):
                    own_time = row[2]
                    routing.append((own_time, f"{Path(file).name}:{line}({function})", row[1]))
            routing.sort(reverse=True)
            found["routing_own_ms_per_write"] = 1000 * sum(r[0] for r in routing) / len(keys)
            found["routing_functions"] = [
                {"function": where, "own_us_per_write": 1e6 * own / len(keys),
                 "calls_per_write": calls / len(keys)}
                for own, where, calls in routing[:15]
            ]  # fmt: skip
    return found


def report(results: dict[str, object]) -> str:
    medians = results["median_client_ms_per_write"]
    assert isinstance(medians, dict)
    lines = [
        f"client CPU per keyed write, one in flight, medians of {results['rounds']} rounds "
        f"of {results['writes_per_round']} (map of {results['groups_in_map']} groups):",
        f"  ForumClient    {medians['forum_client']:.4f} ms",
        f"  ClusterClient  {medians['cluster_client']:.4f} ms",
        f"  ForumClient after map.owner(slot)  {medians['forum_client_and_owner']:.4f} ms "
        f"(the owner alone, cached per slot)",
        f"  ratio          {results['ratio']:.3f} (target <= 1.05: "
        f"{'met' if results['target_met'] else 'MISSED'})",
    ]
    profile = results.get("profile")
    if isinstance(profile, dict):
        lines.append(
            f"profiled (cProfile inflates it): ForumClient "
            f"{profile['forum_client_profiled_ms_per_write']:.4f} ms, ClusterClient "
            f"{profile['cluster_client_profiled_ms_per_write']:.4f} ms per write, of which "
            f"routing's own functions {profile['routing_own_ms_per_write']:.4f} ms:"
        )
        for row in profile["routing_functions"]:
            lines.append(f"  {row['own_us_per_write']:7.2f} us  {row['calls_per_write']:.1f} "
                         f"calls  {row['function']}")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--writes", type=int, default=3000, help="writes per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of each (median)")
    parser.add_argument("--groups", type=int, default=3, help="groups in the map")
    parser.add_argument("--profile", type=Path, help="cProfile one more round; pstats here")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/routing_bench.json")
    arguments = parser.parse_args()
    if arguments.writes < 1 or arguments.rounds < 1 or arguments.groups < 1:
        parser.error("--writes, --rounds and --groups must be 1 or more")
    results = uvloop.run(main(arguments))
    print(report(results))
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {arguments.out}", file=sys.stderr)
