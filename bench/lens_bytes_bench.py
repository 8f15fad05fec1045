"""Redis bytes per completed job: this checkout's Lens against a baseline's.

Usage: ``python bench/lens_bytes_bench.py [--jobs 100000] [--rounds 3]
[--baseline main] [--out PATH]``

Each variant runs in a child process whose ``coordinator`` is the one under
test (the baseline: ``git archive`` of ``--baseline``, unpacked in a
temporary directory; ``PYTHONPATH`` first, the working directory elsewhere),
against one ``redis-server`` (no persistence: this measures memory) flushed
before each. The child makes a Lens with that variant's settings, completes
1,000 jobs to warm up (the epoch markers, the fences, Redis's own tables),
reads ``INFO memory``'s ``used_memory``, completes ``--jobs`` more (keys
``n1-4f2a:<i>``, the shape of an entry id; ``claim_many`` then
``complete_many``, 1,000 at a time), and reads it again: the difference over
``--jobs`` is the figure. It also counts the namespace's keys by role, reads
``MEMORY USAGE`` and the TTL of one key of each role.

Variants (rounds alternate their order; the table shows medians):

* ``baseline``: the baseline's Lens, its defaults (a done marker and a
  history, 7 days each);
* ``this``: this Lens, its defaults (a done marker for ``forget_after`` +
  1 h, a history for 1 h);
* ``this_no_history``: this Lens with ``history_ttl=0``;
* ``baseline_tasks``, ``this_tasks``: each Lens, its defaults, the jobs a
  task layer's (a producer's record naming a task, 2 fields, written
  before each claim): their difference is the job index's cost per job
  (forum.coordinator.jobindex), the record's own being in both;
* ``hash_buckets``: not a Lens: the same done markers as fields of one hash
  per shard and time window (the alternative of bucketing markers so they
  expire together), written with ``HSET`` from the child, for comparison.

Prints a table and the sizing it implies (a million jobs a day); writes JSON
to ``bench/results/lens_bytes_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "lens_bytes_bench.json"
sys.path.insert(0, str(ROOT / "bench"))

from trees import export, run_child  # noqa: E402

BATCH = 1000
WARM = 1000
VARIANTS = ("baseline", "this", "this_no_history", "hash_buckets", "baseline_tasks", "this_tasks")
#: The Lens settings of each variant that runs a Lens.
SETTINGS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "this": {},
    "this_no_history": {"history_ttl": 0},
    "baseline_tasks": {"records": True},
    "this_tasks": {"records": True},
}
#: The alternative's layout: a hash per shard per window, four windows live.
SHARDS, WINDOWS = 16, 4


def job_keys(start: int, stop: int) -> list[str]:
    return [f"n1-4f2a:{i}" for i in range(start, stop)]


# -- the child: run with the source under test first on sys.path -----------------------


async def child_lens(url: str, jobs: int, settings: dict[str, Any]) -> dict[str, Any]:
    import redis.asyncio  # noqa: PLC0415

    from forum import coordinator  # noqa: PLC0415  (the source under test: imported in the child only)
    from forum.coordinator.records import NewRecord  # noqa: PLC0415

    settings = dict(settings)
    records = settings.pop("records", False)

    async with (
        coordinator.Lens.from_url(url, **settings) as lens,
        redis.asyncio.Redis.from_url(url) as client,
    ):

        async def complete(keys: list[str]) -> None:
            for at in range(0, len(keys), BATCH):
                part = keys[at : at + BATCH]
                if records:
                    fields = {"task": "t", "state": "enqueued"}
                    await lens.record_enqueued_many([NewRecord(k, fields, 86400) for k in part])
                claims = await lens.claim_many([(k, None) for k in part], owner="w-1", lease=60)
                await lens.complete_many([c for c in claims if not isinstance(c, Exception)])

        await complete(job_keys(-WARM, 0))
        before = (await client.info("memory"))["used_memory"]
        await complete(job_keys(0, jobs))
        after = (await client.info("memory"))["used_memory"]
        roles: dict[str, int] = {}
        sample: dict[str, bytes] = {}
        async for name in client.scan_iter(match="{forum:lens:*", count=1000):
            role = name.split(b"}:", 1)[1].split(b":", 1)[0].decode()
            roles[role] = roles.get(role, 0) + 1
            sample.setdefault(role, name)
        per_role: dict[str, dict[str, Any]] = {
            role: {
                "keys": count,
                "memory_usage": await client.memory_usage(sample[role]),
                "ttl_s": await client.pttl(sample[role]) / 1000,
            }
            for role, count in sorted(roles.items())
        }
    return {
        "coordinator": coordinator.__file__,
        "bytes_per_job": (after - before) / jobs,
        "keys_per_job": sum(r["keys"] for r in per_role.values()) / (jobs + WARM),
        "roles": per_role,
    }


async def child_hash_buckets(url: str, jobs: int) -> dict[str, Any]:
    import zlib  # noqa: PLC0415

    import redis.asyncio  # noqa: PLC0415

    async with redis.asyncio.Redis.from_url(url) as client:

        async def mark(keys: list[str], first: int) -> None:
            for at in range(0, len(keys), BATCH):
                async with client.pipeline(transaction=False) as pipe:
                    for i, key in enumerate(keys[at : at + BATCH], start=first + at):
                        shard = zlib.crc32(key.encode()) % SHARDS
                        window = i * WINDOWS // (jobs + WARM)
                        token = 1_796_122_961_341_234 + i
                        pipe.hset(f"{{forum:lens:{shard}}}:done@{window}", key, token)
                    await pipe.execute()

        await mark(job_keys(-WARM, 0), 0)
        before = (await client.info("memory"))["used_memory"]
        await mark(job_keys(0, jobs), WARM)
        after = (await client.info("memory"))["used_memory"]
        keys = await client.dbsize()
    return {"bytes_per_job": (after - before) / jobs, "keys_per_job": keys / (jobs + WARM)}


# -- the parent ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH")
    port = free_port()
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(directory)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return process, url
        except OSError:
            time.sleep(0.05)  # redis-server is starting: try again
    process.kill()
    raise SystemExit("redis-server did not start")


def flushall(url: str) -> None:
    port = int(url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"FLUSHALL\r\n")
        s.recv(16)


def run_variant(source: Path, what: str, url: str, jobs: int) -> dict[str, Any]:
    """This file's child for variant ``what``, on ``source``
    (:func:`trees.run_child`), on a flushed Redis."""
    flushall(url)
    if what == "hash_buckets":
        return run_child(Path(__file__), "child_hash_buckets", source, [url, jobs])
    return run_child(Path(__file__), "child_lens", source, [url, jobs, SETTINGS[what]])


def sizing(report: dict[str, Any], jobs_per_day: float = 1e6) -> dict[str, float]:
    """Redis bytes held at a steady ``jobs_per_day``: each variant's bytes per
    job for as long as it keeps them (the baseline: 7 days; this Lens: the
    done marker for a day and an hour, the history for an hour)."""
    med = report["median_bytes_per_job"]
    done_only = med["this_no_history"]
    history = med["this"] - done_only
    return {
        "baseline": jobs_per_day * 7 * med["baseline"],
        "this": jobs_per_day * (25 / 24 * done_only + 1 / 24 * history),
        "this_no_history": jobs_per_day * 25 / 24 * done_only,
        "hash_buckets": jobs_per_day * 25 / 24 * (1 + 1 / WINDOWS) * med["hash_buckets"],
    }


def redis_version() -> str:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def main(args: argparse.Namespace) -> dict[str, Any]:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    report: dict[str, Any] = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "redis": redis_version(),
        "jobs": args.jobs,
        "rounds": args.rounds,
        "baseline": args.baseline,
        "head": head,
        "runs": {name: [] for name in args.variants},
    }

    with tempfile.TemporaryDirectory() as tmp:
        sources = {"baseline": export(args.baseline, Path(tmp)), "this": ROOT}
        process, url = start_redis(Path(tmp))
        try:
            for round_ in range(args.rounds):
                order = args.variants if round_ % 2 == 0 else tuple(reversed(args.variants))
                for name in order:
                    source = sources["baseline" if name.startswith("baseline") else "this"]
                    found = run_variant(source, name, url, args.jobs)
                    # The child's coordinator was the source's: said, not where it was.
                    imported = found.pop("coordinator", None)
                    if imported is not None and not imported.startswith(str(source)):
                        raise RuntimeError(f"{name} imported {imported}, not {source}'s")
                    found["source"] = "baseline" if name.startswith("baseline") else "this"
                    report["runs"][name].append(found)
                    print(f"round {round_ + 1} {name:<16} {found['bytes_per_job']:7.1f} B/job",
                          flush=True)  # fmt: skip
        finally:
            process.terminate()
            process.wait()
    report["median_bytes_per_job"] = {
        name: statistics.median(r["bytes_per_job"] for r in runs)
        for name, runs in report["runs"].items()
    }
    if {"baseline", "this", "this_no_history", "hash_buckets"} <= set(args.variants):
        report["sizing_1m_jobs_per_day"] = sizing(report)
    return report


def print_table(report: dict[str, Any]) -> None:
    med = report["median_bytes_per_job"]
    size = report.get("sizing_1m_jobs_per_day", {})
    print(f"\nRedis bytes per completed job ({report['jobs']:,} jobs, median of "
          f"{report['rounds']} rounds; {report['redis']})")  # fmt: skip
    print(f"  {'variant':<18}{'B/job':>8}{'keys/job':>10}{'held at 1M jobs/day':>22}  per key")
    for name in report["runs"]:
        runs = report["runs"][name]
        keys = runs[-1]["keys_per_job"]
        roles = runs[-1].get("roles", {})
        detail = ", ".join(
            f"{role} {r['memory_usage']} B for {r['ttl_s'] / 3600:.0f} h"
            for role, r in roles.items()
            if role in ("done", "history")
        )
        held = f"{size[name] / 1e9:>19.2f} GB" if name in size else f"{'-':>22}"
        print(f"  {name:<18}{med[name]:>8.1f}{keys:>10.2f}{held}  {detail}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="main", help="the git ref to compare against")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        default=VARIANTS[:4],
        help="which to run (default: the first four)",
    )
    arguments = parser.parse_args()
    if arguments.jobs < 1 or arguments.rounds < 1:
        parser.error("--jobs and --rounds must be at least 1")
    result = main(arguments)
    print_table(result)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(result, indent=2))
    print(f"written to {arguments.out}")
