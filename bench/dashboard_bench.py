"""What the dashboard's Prefixes panel costs a node: ``LiveIndex.groups``
(a bisection per group, B) against counting every live tuple's group (A,
what a scan of ``GET /v1/tuples`` pages would do), in one run.

Usage: ``python bench/dashboard_bench.py [--live 1000000] [--groups 10 100]
[--rounds 5] [--out PATH]``

At ``--live`` tuples, payloads ``gNNN/item/NNNNNNNN`` spread over each
``--groups`` count, the seconds one call takes (median of ``--rounds``) for
each way, and their ratio. The page refreshes every 2 s, so a call must be
well under that on a large node. Prints a table; writes JSON to
``bench/results/dashboard_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections import Counter
from pathlib import Path

from forum.node.core.entries import EntryId, Tuple
from forum.node.space.index import LiveIndex

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "dashboard_bench.json"
SEPARATOR = b"/"


def filled(live: int, groups: int) -> LiveIndex:
    index = LiveIndex()
    index.bulk_load(
        [Tuple(EntryId("bench", i + 1), b"g%03d/item/%08d" % (i % groups, i)) for i in range(live)]
    )
    return index


def by_scan(index: LiveIndex) -> dict[bytes, int]:
    """Every live tuple looked at: its group counted."""
    counts: Counter[bytes] = Counter()
    for _, item in index.iter_matching(b""):
        cut = item.payload.find(SEPARATOR)
        counts[item.payload if cut < 0 else item.payload[: cut + 1]] += 1
    return dict(counts)


def timed(call: object, rounds: int) -> float:
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()  # type: ignore[operator]
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    for groups in args.groups:
        index = filled(args.live, groups)
        assert index.groups(SEPARATOR, 500) == by_scan(index)  # the same answer both ways
        scan = timed(lambda index=index: by_scan(index), args.rounds)
        bisect = timed(lambda index=index: index.groups(SEPARATOR, 500), args.rounds)
        rows.append({"live": args.live, "groups": groups, "scan_s": scan, "groups_s": bisect})
    print(f"{'live':>10} {'groups':>7} {'A scan s':>10} {'B groups s':>11} {'A/B':>8}")
    for row in rows:
        ratio = row["scan_s"] / row["groups_s"]
        print(
            f"{row['live']:>10} {row['groups']:>7} {row['scan_s']:>10.4f} "
            f"{row['groups_s']:>11.6f} {ratio:>7.0f}x"
        )
    report = {"python": platform.python_version(), "rounds": args.rounds, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
