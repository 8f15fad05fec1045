"""What the MANIFEST costs the Strand: another version (A) against this checkout (B), in one run.

Usage::

    git -C /work/main archive HEAD | tar -x -C /tmp/main   # or any tree
    python bench/strand_manifest_bench.py --against /tmp/main [--entries 300000] [--rounds 5]

Each source runs in a child process of its own (``PYTHONPATH`` first), A and
B alternated, ``--rounds`` times; the table shows the medians side by side
and ``bench/results/strand_manifest_bench.json`` has every round.

appends      fsync ``always``, 16 appenders of one 100-byte write each in a
             loop for ``--seconds``: acknowledged writes per second (B writes
             its checkpoint to the MANIFEST every second: two more fsyncs);
replay       ``Strand.open`` of one log of ``--entries`` 100-byte writes in
             8 MiB segments (made once, by B; A reads it as it is): seconds
             (B checks every file and keeps each segment's seq ranges).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from trees import run_child

# In a child (trees.run_child) ``forum`` is the source's under test.
from forum.node.storage.strand import Strand, StrandConfig

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "strand_manifest_bench.json"
SEGMENT = 8 * 1024 * 1024
PAYLOAD = b"." * 100


async def appends(directory: str, seconds: float) -> float:
    cfg = StrandConfig(storage=Path(directory), segment_bytes=SEGMENT).with_node_name("bench")
    strand = await Strand.open(cfg)
    done = 0
    stop = time.perf_counter() + seconds

    async def one() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await strand.append_writes([PAYLOAD])
            done += 1

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(16):
            group.create_task(one())
    elapsed = time.perf_counter() - started
    await strand.close()
    return done / elapsed


async def make_log(directory: str, entries: int) -> None:
    cfg = StrandConfig(storage=Path(directory), segment_bytes=SEGMENT, fsync="never")
    strand = await Strand.open(cfg.with_node_name("bench"))
    for _ in range(0, entries, 1000):
        await strand.append_writes([PAYLOAD] * 1000)
    await strand.close()


async def replay(directory: str) -> float:
    cfg = StrandConfig(storage=Path(directory), segment_bytes=SEGMENT).with_node_name("bench")
    started = time.perf_counter()
    strand = await Strand.open(cfg)
    elapsed = time.perf_counter() - started
    await strand.close()
    return elapsed


def run(source: Path | None, what: str, directory: Path, args: argparse.Namespace) -> float:
    """``what`` (appends or replay) on ``directory``, in a child on ``source``."""
    child = [args.seconds] if what == "appends" else []
    seconds: float = run_child(Path(__file__), what, source or ROOT, [str(directory), *child])
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="version A's tree (none: B only)")
    parser.add_argument("--entries", type=int, default=300_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sources: dict[str, Path | None] = {"B": None}
    if args.against:
        sources = {"A": args.against, "B": None}
    rounds: dict[str, dict[str, list[float]]] = {s: {"appends": [], "replay": []} for s in sources}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        log = Path(tmp) / "log"
        run_child(Path(__file__), "make_log", ROOT, [str(log), args.entries])  # by B
        for _ in range(args.rounds):
            for name, source in sources.items():
                target = Path(tmp) / f"appends-{name}"
                rounds[name]["appends"].append(run(source, "appends", target, args))
                shutil.rmtree(target)
                rounds[name]["replay"].append(run(source, "replay", log, args))
    medians = {s: {k: statistics.median(v) for k, v in r.items()} for s, r in rounds.items()}
    print(f"{'':10}" + "".join(f"{name:>14}" for name in sources))
    print(f"{'appends/s':10}" + "".join(f"{medians[s]['appends']:>14.0f}" for s in sources))
    print(f"{'replay s':10}" + "".join(f"{medians[s]['replay']:>14.3f}" for s in sources))
    report = {"entries": args.entries, "seconds": args.seconds, "rounds": rounds}
    report["medians"] = medians
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["medians"]))


if __name__ == "__main__":
    main()
