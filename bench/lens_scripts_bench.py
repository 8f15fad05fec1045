"""The Lens's hot-path scripts, timed inside Redis: this checkout's
``claim.lua`` + ``complete.lua`` against a baseline checkout's.

What a worker pays per job in the Lens is one ``claim`` and one
``complete`` script. Timed from a client on a shared machine, the pair's
rate swings with everything else running (bench/worker_bench.py, whose
``--baseline`` compares whole Lenses that way); Redis's own count of the
time its scripts ran (``INFO commandstats``, ``usec_per_call`` of
``evalsha``) leaves out the network, the client and the disk (an AOF
fsync runs after the command, not in it), so it shows what a change to
the scripts costs by itself.

Each round flushes a redis-server started on a free port (``appendonly
no``: the disk is not what is compared), then runs ``--pairs`` claim +
complete pairs of fresh keys (the path of a job that succeeds first time)
through each tree's scripts in turn, as the Lens sends them (the prelude
prepended, ``KEYS`` by each header's roles, the epoch last), resetting
the stats before each. The trees alternate for ``--rounds`` rounds; the
medians are printed. With ``--records`` each key first has a task's job
record, indexed queued (forum.coordinator.jobindex), written before the
stats are reset: the path of a task job, whose claim and completion move
it in the job index; without, a raw Worker's keys, which no index holds.
The baseline is a directory holding another
checkout (``git -C main archive HEAD | tar -x -C DIR``).

    .venv/bin/python bench/lens_scripts_bench.py --baseline /tmp/main [--pairs 20000]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from redis import Redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forum.coordinator.keys import KeySchema  # noqa: E402
from tests.fixtures.redis_server import RedisServer  # noqa: E402

LUA = Path("coordinator/forum/coordinator/lua")
_KEY = re.compile(r"^-- KEYS\[(\d+)\]\s+<tag>:(\w+)", re.MULTILINE)
_ARGV = re.compile(r"^-- ARGV\[(\d+)\]", re.MULTILINE)
EPOCH = "bench-epoch"


class Scripts:
    """One tree's claim and complete scripts, registered on ``client``."""

    def __init__(self, tree: Path, client: Redis) -> None:
        prelude = (tree / LUA / "prelude.lua").read_text()
        self.roles: dict[str, list[str]] = {}
        self.argc: dict[str, int] = {}
        self.sha: dict[str, str] = {}
        for name in ("claim", "complete"):
            text = (tree / LUA / f"{name}.lua").read_text()
            self.roles[name] = [role for _, role in sorted(_KEY.findall(text), key=_index)]
            self.argc[name] = max(int(n) for n in _ARGV.findall(text))
            self.sha[name] = client.script_load(prelude + "\n" + text)

    def pair(self, client: Redis, schema: KeySchema, key: str) -> None:
        """Claim ``key`` as a worker does (no re-offer, attempt 1), then complete it."""
        shard = schema.shard(key)
        claim = self._argv("claim", [key, 30000, "bench", "0", "", 1, 3600000])
        reply = client.evalsha(self.sha["claim"], *self._keys("claim", schema, shard, key), *claim)
        complete = self._argv("complete", [key, reply[1], 86400000, 3600000])
        client.evalsha(self.sha["complete"], *self._keys("complete", schema, shard, key), *complete)

    def _keys(self, name: str, schema: KeySchema, shard: int, key: str) -> list[Any]:
        keys = schema.keys_for(tuple(self.roles[name]), shard, key)
        return [len(keys), *keys]

    def _argv(self, name: str, known: list[Any]) -> list[Any]:
        """``known`` (the ARGV both versions share, in order), padded with empty
        strings to the header's count (a newer script's extra arguments: none
        on this path), and the epoch last."""
        return [*known, *[""] * (self.argc[name] - len(known) - 1), EPOCH]


def _index(found: tuple[str, str]) -> int:
    return int(found[0])


def usec_per_pair(
    client: Redis, scripts: Scripts, pairs: int, label: str, records: bool = False
) -> float:
    """Redis's time inside the scripts per claim+complete pair, microseconds."""
    schema = KeySchema()
    if records:
        write_records(client, schema, [f"{label}:{i}" for i in range(pairs)])
    client.config_resetstat()
    for i in range(pairs):
        scripts.pair(client, schema, f"{label}:{i}")
    stats = client.info("commandstats")["cmdstat_evalsha"]
    return float(stats["usec"]) / pairs


def write_records(client: Redis, schema: KeySchema, keys: list[str]) -> None:
    """A producer's record of task "bench" for each key, indexed queued."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        tag = schema.tag(schema.shard(key))
        pipe.hset(schema.task(key), mapping={"task": "bench", "state": "enqueued", "ix": "queued"})
        pipe.zadd(f"{tag}:ix:queued", {key: 1})
        pipe.zadd(f"{tag}:ix:queued:bench", {key: 1})
        pipe.sadd(f"{tag}:ix:tasks", "bench")
        # A baseline from before <tag>:ix:tasks kept its counts in a hash.
        pipe.hincrby(f"{tag}:ix:counts", "queued:bench", 1)
    pipe.execute()


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="lens-scripts-bench-") as directory:
        server = RedisServer(Path(directory))
        server.start()
        try:
            client = Redis.from_url(server.url)
            client.config_set("appendonly", "no")
            trees = {"this": ROOT, "baseline": args.baseline}
            times: dict[str, list[float]] = {name: [] for name in trees}
            for round_ in range(args.rounds):
                order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
                for name in order:
                    client.flushall()
                    schema = KeySchema()
                    for shard in range(schema.shards):
                        client.set(schema.epoch(shard), EPOCH)
                    scripts = Scripts(trees[name], client)
                    times[name].append(
                        usec_per_pair(client, scripts, args.pairs, name, args.records)
                    )
            client.close()
        finally:
            server.stop()
    this, baseline = (statistics.median(times[name]) for name in trees)
    kind = "task jobs (records, indexed)" if args.records else "raw keys (no record)"
    print(f"claim + complete inside Redis, usec per pair, median of {args.rounds} rounds "
          f"of {args.pairs} pairs, {kind}")  # fmt: skip
    ratio = this / baseline
    print(f"  this tree {this:6.1f}   baseline {baseline:6.1f}   this/baseline {ratio:.2f}")
    print(f"  (each round: {', '.join(f'{n} {t}' for n, t in _rounds(times).items())})")


def _rounds(times: dict[str, list[float]]) -> dict[str, str]:
    return {name: " ".join(f"{t:.1f}" for t in values) for name, values in times.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another checkout's tree")
    parser.add_argument("--pairs", type=int, default=20000, help="pairs per round (20000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (median; 5)")
    parser.add_argument("--records", action="store_true", help="keys of task jobs, indexed")
    main(parser.parse_args())
