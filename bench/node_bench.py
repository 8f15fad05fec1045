"""Node-core benchmark: the Strand, the live index and the Forum, on this disk.

Prints a table and writes ``bench/results/node_bench.json``. In one run:

* raw append ceiling: 100-byte framed records written by one thread, one
  fsync per group of N (N = the number of concurrent appenders), no Forum;
* Forum write and take rates, fsync ``always`` and ``never``, 1 and 64
  concurrent coroutines (the ratio to the raw ceiling is the target);
* take and read latency at 1,000,000 live tuples for an exact payload, a
  prefix matching 1%, a prefix matching all: the index step alone (what the
  20 us target is about) and the whole ``Forum.take`` with fsync ``never``;
* replay time of 1,000,000 entries (``Strand.open`` + ``Forum(strand)``);
* memory per live tuple beyond its payload (tracemalloc over the index; the
  RSS of a real ``forum serve`` is ``bench/memory_bench.py``).

It runs on uvloop, as ``forum serve`` does; ``--loop asyncio`` for the default loop.

Usage: ``python bench/node_bench.py [--live N] [--seconds S]``.

``--write-path`` measures only the ceiling and the write and take rates (with
the CPU time per operation, which a busy machine disturbs less than the
rates), ``--rounds`` times, each round in a fresh process; with ``--against
DIR`` (a checkout of another version, e.g. ``git -C ../main archive HEAD |
tar -x -C /tmp/main``) every round runs that version (A) and this one (B)
one after the other, and the table shows the medians of each side by side.
It writes ``bench/results/node_write_path.json``::

    python bench/node_bench.py --write-path --against /tmp/main --rounds 5 --seconds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from node import Forum, Pattern, Strand, StrandConfig, Tuple
from node.entries import EntryId
from node.index import LiveIndex
from node.segment import frame

RESULTS = Path(__file__).parent / "results"


def raw_append_rate(directory: Path, group: int, seconds: float) -> float:
    """Records/s appending 100-byte records, one fsync per ``group`` records."""
    record = frame(b"x" * 100)
    chunk = record * group
    path = directory / f"raw-{group}.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n = 0
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            os.write(fd, chunk)
            os.fsync(fd)
            n += group
    finally:
        os.close(fd)
        path.unlink()
    return n / seconds


async def forum_rates(
    directory: Path, fsync: str, workers: int, seconds: float
) -> dict[str, float]:
    cfg = StrandConfig().with_storage(directory).with_fsync(fsync)  # type: ignore[arg-type]
    payload = b"job/" + b"x" * 96
    async with Forum(await Strand.open(cfg)) as forum:

        async def loop(op: str, stop: float) -> int:
            n = 0
            while time.perf_counter() < stop:
                if op == "write":
                    await forum.write(payload)
                elif await forum.take(Pattern(b"job/")) is None:
                    break
                n += 1
            return n

        out: dict[str, float] = {}
        for op in ("write", "take"):
            stop = time.perf_counter() + seconds
            t0, cpu0 = time.perf_counter(), time.process_time()
            done = sum(await asyncio.gather(*(loop(op, stop) for _ in range(workers))))
            out[f"{op}_per_s"] = done / (time.perf_counter() - t0)
            # CPU of the whole process (the fsync thread too) per operation.
            out[f"{op}_cpu_us"] = (time.process_time() - cpu0) / max(done, 1) * 1e6
    return out


def _percentiles(samples: list[float]) -> dict[str, float]:
    samples.sort()
    return {
        "p50_us": samples[len(samples) // 2] * 1e6,
        "p99_us": samples[int(len(samples) * 0.99)] * 1e6,
    }


async def latency_at_scale(directory: Path, live: int, samples: int) -> dict[str, dict[str, float]]:
    """Index-level and whole-take latencies with ``live`` tuples."""
    cfg = StrandConfig().with_storage(directory).with_fsync("never")
    out: dict[str, dict[str, float]] = {}
    async with Forum(await Strand.open(cfg)) as forum:
        # Payloads b"k/%02d/%08d": prefix b"k/07/" matches 1%; the exact payload 1.
        batch = 10_000
        for start in range(0, live, batch):
            await forum.write_many(
                [b"k/%02d/%08d" % (i % 100, i) for i in range(start, min(live, start + batch))]
            )
        index: LiveIndex = forum._index  # the step the latency target is about
        # An exact payload matches one tuple: sample a different one each time.
        exact = [b"k/%02d/%08d" % (i % 100, i) for i in range(live // 2, live // 2 + samples)]
        patterns = {
            "exact": exact,
            "prefix_1pct": [b"k/07/"] * samples,
            "prefix_100pct": [b"k/"] * samples,
        }
        for name, prefixes in patterns.items():
            reads = []
            for prefix in prefixes:
                t0 = time.perf_counter()
                index.oldest(prefix)
                reads.append(time.perf_counter() - t0)
            index_takes = []
            forum_takes = []
            for prefix in prefixes:
                t0 = time.perf_counter()
                found = index.oldest(prefix)
                assert found is not None
                index.remove(found[0])
                index_takes.append(time.perf_counter() - t0)
                index.restore(*found)
                t0 = time.perf_counter()
                got = await forum.take(Pattern(prefix))
                forum_takes.append(time.perf_counter() - t0)
                assert got is not None, name
            out[name] = {
                **{f"read_{k}": v for k, v in _percentiles(reads).items()},
                **{f"index_take_{k}": v for k, v in _percentiles(index_takes).items()},
                **{f"forum_take_{k}": v for k, v in _percentiles(forum_takes).items()},
            }
    return out


async def replay_time(directory: Path, entries: int) -> dict[str, float]:
    cfg = StrandConfig().with_storage(directory).with_fsync("never")
    async with Forum(await Strand.open(cfg)) as forum:
        batch = 10_000
        for start in range(0, entries, batch):
            await forum.write_many([b"r/%08d" % i for i in range(start, start + batch)])
        await forum.take_many(Pattern(b"r/"), 1000)
    t0 = time.perf_counter()
    strand = await Strand.open(cfg)
    t_strand = time.perf_counter() - t0
    forum = Forum(strand)
    total = time.perf_counter() - t0
    live = await forum.count(Pattern(b""))
    await forum.close()
    return {"entries": entries + 1000, "seconds": total, "strand_open_s": t_strand, "live": live}


def memory_per_tuple(n: int) -> float:
    origin = "bench-node-00000000"
    payloads = [b"m/%08d" % i for i in range(n)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index = LiveIndex()
    for seq, payload in enumerate(payloads, 1):
        index.add(Tuple(EntryId(origin, seq), payload))
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / n


async def write_path_round(seconds: float) -> dict[str, float]:
    """One round of the write path: the ceiling, then each rate, flattened."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=RESULTS.parent) as tmp:
        base = Path(tmp)
        out["raw_1"] = raw_append_rate(base, 1, seconds / 2)
        out["raw_64"] = raw_append_rate(base, 64, seconds)
        for fsync in ("always", "never"):
            for workers in (1, 64):
                key = f"{fsync}_c{workers}"
                for name, value in (await forum_rates(base / key, fsync, workers, seconds)).items():
                    out[f"{key}.{name}"] = value
    return out


def write_path(args: argparse.Namespace) -> None:
    """Rounds in fresh processes, A (``--against``) and B alternated; medians."""
    sides = {"B": None} if args.against is None else {"A": args.against, "B": None}
    rounds: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for _ in range(args.rounds):
        for side, tree in sides.items():
            env = dict(os.environ)
            if tree is not None:  # the other version's packages come first
                env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")])
            command = [sys.executable, __file__, "--one-round", "--seconds", str(args.seconds)]
            command += ["--loop", args.loop]
            done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            rounds[side].append(json.loads(done.stdout.splitlines()[-1]))
    medians = {
        side: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for side, runs in rounds.items()
    }
    print(f"write path, {args.rounds} rounds of {args.seconds} s, medians ({args.loop})")
    print(f"{'':<12}" + "".join(f"{side + ' ' + col:>14}" for col in _COLUMNS for side in sides))
    print(f"{'ceiling':<12}" + "".join(f"{m['raw_64']:>14.0f}" for m in medians.values()))
    for key in ("always_c1", "always_c64", "never_c1", "never_c64"):
        cells = [_cell(medians[side], key, col) for col in _COLUMNS for side in sides]
        print(f"{key:<12}" + "".join(f"{c:>14}" for c in cells))
    RESULTS.mkdir(exist_ok=True)
    report = {"loop": args.loop, "seconds": args.seconds, "against": str(args.against)}
    (RESULTS / "node_write_path.json").write_text(
        json.dumps({**report, "medians": medians, "rounds": rounds}, indent=2)
    )


_COLUMNS = ("write/s", "take/s", "write us", "write/ceil")


def _cell(m: dict[str, float], key: str, column: str) -> str:
    """One cell: the ratio is to the one-record ceiling at 1 writer, to the
    64-record group at 64 (a rate, not a ratio, without fsync)."""
    if column == "write/s":
        return f"{m[key + '.write_per_s']:.0f}"
    if column == "take/s":
        return f"{m[key + '.take_per_s']:.0f}"
    if column == "write us":
        return f"{m[key + '.write_cpu_us']:.1f}"
    ceiling = m["raw_64"] if key.endswith("64") else m["raw_1"]
    return f"{m[key + '.write_per_s'] / ceiling:.2f}" if key.startswith("always") else "-"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--live", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument(
        "--loop", choices=("uvloop", "asyncio"), default="uvloop",
        help="the event loop (forum serve runs on uvloop; default uvloop)",
    )  # fmt: skip
    parser.add_argument("--write-path", action="store_true", help="only the write path")
    parser.add_argument("--against", type=Path, help="with --write-path: version A's tree")
    parser.add_argument("--rounds", type=int, default=3, help="with --write-path")
    parser.add_argument("--one-round", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_round:
        print(json.dumps(await write_path_round(args.seconds)))
        return
    if args.write_path:
        write_path(args)
        return
    results: dict[str, object] = {"loop": args.loop}
    with tempfile.TemporaryDirectory(dir=RESULTS.parent) as tmp:
        base = Path(tmp)
        raw = {g: raw_append_rate(base, g, args.seconds) for g in (1, 64)}
        results["raw_append_per_s"] = raw
        rates = {}
        for fsync in ("always", "never"):
            for workers in (1, 64):
                key = f"{fsync}_c{workers}"
                rates[key] = await forum_rates(base / key, fsync, workers, args.seconds)
        results["forum"] = rates
        # Each sample takes one tuple: keep within the 1% prefix's share.
        samples = max(10, min(2000, args.live // 400))
        results["latency"] = await latency_at_scale(base / "lat", args.live, samples)
        results["replay"] = await replay_time(base / "replay", args.live - 1000)
    results["bytes_per_live_tuple"] = memory_per_tuple(min(args.live, 200_000))

    print(f"raw append, fsync per record:    {raw[1]:>10.0f} rec/s")
    print(f"raw append, fsync per 64 (group): {raw[64]:>10.0f} rec/s  <- ceiling")
    print(f"{'forum':<16}{'write/s':>12}{'take/s':>12}{'vs ceiling':>12}")
    for key, r in rates.items():
        ceiling = raw[64] if key.endswith("64") else raw[1]
        ratio = (
            min(r["write_per_s"], r["take_per_s"]) / ceiling
            if key.startswith("always")
            else float("nan")
        )
        print(f"{key:<16}{r['write_per_s']:>12.0f}{r['take_per_s']:>12.0f}{ratio:>12.2f}")
    print(f"latency at {args.live} live tuples (microseconds):")
    for name, lat in results["latency"].items():  # type: ignore[attr-defined]
        print(f"  {name:<14}" + "  ".join(f"{k}={v:.1f}" for k, v in lat.items()))
    replay = results["replay"]
    print(
        f"replay: {replay['entries']} entries in {replay['seconds']:.2f} s "  # type: ignore[index]
        f"(strand {replay['strand_open_s']:.2f} s)"
    )  # type: ignore[index]
    print(f"memory per live tuple beyond payload: {results['bytes_per_live_tuple']:.0f} bytes")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "node_bench.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    import sys

    import uvloop

    # The loop is picked before main() parses the arguments.
    loop_factory = None if "asyncio" in sys.argv else uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())
