"""The live index alone, another version (A) against this checkout (B), in one run.

Usage::

    git -C /work/main archive HEAD | tar -x -C /tmp/main   # or any tree
    python bench/index_bench.py --against /tmp/main [--live 1000000] [--samples 2000]

Each source runs in a child process of its own (``PYTHONPATH`` first), one
after the other, ``--rounds`` times; the table shows the medians side by side
and ``bench/results/index_bench.json`` has every round. Measured at
``--live`` tuples, payloads ``k/NN/NNNNNNNN`` (``NN`` = i % 100):

add          ``LiveIndex.add`` of the ``--live`` tuples, per second;
bulk_load    ``bulk_load`` of the same, seconds (a replay's index step);
memory       bytes per tuple beyond its payload (tracemalloc over ``add``);
read, take   ``oldest`` and ``oldest`` + ``remove`` p50/p99 in us, three
             patterns: an exact payload (a different one per sample), the
             prefix ``k/07/`` (1 %), ``k/`` (all); each take is put back
             (``restore`` with its priority, not timed);
page         ``iter_matching`` of the two prefixes from the middle of the
             arrivals on, a page of 100 (``Forum.list``), p50/p99 in us;
mixed        the same reads and takes with the tuples spread over ten
             priorities (-4 to 5, seeded; a version without priorities
             ignores them and measures its plain case again). Issue 14's
             target: p99 within 1.2x of the plain one: the ``ratio_`` rows,
             mixed p99 over plain p99 (medians), per source.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import tracemalloc
from itertools import islice
from pathlib import Path

from trees import run_child

# In a child (trees.run_child) ``forum`` is the source's under test.
from forum.node.core.entries import EntryId, Properties, Tuple
from forum.node.space.index import LiveIndex

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "index_bench.json"
SEED = 14


def payload(i: int) -> bytes:
    return b"k/%02d/%08d" % (i % 100, i)


def _percentiles(samples: list[float]) -> dict[str, float]:
    samples.sort()
    return {
        "p50_us": samples[len(samples) // 2] * 1e6,
        "p99_us": samples[int(len(samples) * 0.99)] * 1e6,
    }


def _tuples(live: int, priorities: list[int] | None) -> list[Tuple]:
    props = [Properties()] if priorities is None else [Properties(priority=p) for p in range(-4, 6)]
    return [
        Tuple(
            EntryId("bench-node", i + 1),
            payload(i),
            props[0 if priorities is None else priorities[i]],
        )
        for i in range(live)
    ]


def _latencies(index: LiveIndex, tuples: list[Tuple], samples: int) -> dict[str, float]:
    """Read and take p50/p99 for the three patterns."""
    live = len(tuples)
    exact = [payload(i) for i in range(live // 2, live // 2 + samples)]
    patterns = {
        "exact": exact,
        "prefix_1pct": [b"k/07/"] * samples,
        "prefix_100pct": [b"k/"] * samples,
    }
    out: dict[str, float] = {}
    for name, prefixes in patterns.items():
        reads, takes = [], []
        for prefix in prefixes:
            t0 = time.perf_counter()
            index.oldest(prefix)
            reads.append(time.perf_counter() - t0)
        for prefix in prefixes:
            t0 = time.perf_counter()
            found = index.oldest(prefix)
            if found is None:
                raise RuntimeError(f"no match for {prefix!r}")
            index.remove(found[0])
            takes.append(time.perf_counter() - t0)
            # Put back with its priority, as the Forum does (the index hands
            # tuples out plain): the mix stays as it was.
            _, item = found
            index.restore(found[0], Tuple(item.id, item.payload, tuples[item.id.seq - 1].props))
        pages = []
        for _ in range(max(1, samples // 10) if name != "exact" else 0):
            t0 = time.perf_counter()
            next(islice(index.iter_matching(prefixes[0], after=live // 2), 99, None))
            pages.append(time.perf_counter() - t0)
        timed = [("read", reads), ("take", takes)] + ([("page", pages)] if pages else [])
        for kind, timings in timed:
            for stat, value in _percentiles(timings).items():
                out[f"{name}_{kind}_{stat}"] = value
    return out


def one_round(live: int, samples: int) -> dict[str, float]:
    """This process's ``node`` (the source under test), measured once."""
    plain = _tuples(live, None)
    index = LiveIndex()
    t0 = time.perf_counter()
    for item in plain:
        index.add(item)
    out = {"add_per_s": live / (time.perf_counter() - t0)}
    out.update({f"plain_{k}": v for k, v in _latencies(index, plain, samples).items()})
    del index
    t0 = time.perf_counter()
    LiveIndex().bulk_load(plain)
    out["bulk_load_s"] = time.perf_counter() - t0
    counted = plain[:200_000]  # tracemalloc is slow; enough to see the slope
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index = LiveIndex()
    for item in counted:
        index.add(item)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    out["memory_b"] = grown / len(counted) - len(counted[0].payload)
    del index, plain
    rng = random.Random(SEED)
    mixed = _tuples(live, [rng.randrange(10) for _ in range(live)])
    index = LiveIndex()
    for item in mixed:
        index.add(item)
    out.update({f"mixed_{k}": v for k, v in _latencies(index, mixed, samples).items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--live", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--against", type=Path, help="version A's tree (none: B only)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    sources = {"B": ROOT} if args.against is None else {"A": args.against.resolve(), "B": ROOT}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
    for _ in range(args.rounds):
        for name, source in sources.items():
            child = [args.live, args.samples]
            rounds[name].append(run_child(Path(__file__), "one_round", source, child))
    medians = {
        n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in rounds.items()
    }
    for medians_of in medians.values():
        for key in [k for k in medians_of if k.startswith("mixed_") and k.endswith("_p99_us")]:
            measure = key.removeprefix("mixed_")
            medians_of["ratio_" + measure] = medians_of[key] / medians_of["plain_" + measure]
    print(f"live index at {args.live:,} tuples, {args.samples} samples, medians of {args.rounds}")
    print(f"{'measure':<34}" + "".join(f"{name:>14}" for name in sources))
    for key in medians["B"]:
        print(f"{key:<34}" + "".join(f"{medians[n][key]:>14.2f}" for n in sources))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "live": args.live,
        "samples": args.samples,
        "seed": SEED,
        "sources": {n: str(s) for n, s in sources.items()},
    }
    args.out.write_text(json.dumps({**report, "rounds": rounds, "medians": medians}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
