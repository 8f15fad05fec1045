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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trees import pythonpath

# In a child (below) ``node`` is the source's under test: its PYTHONPATH
# comes first, and the working directory is not the checkout.
from forum.node.storage.strand import Strand, StrandConfig

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "strand_manifest_bench.json"
SEGMENT = 8 * 1024 * 1024
PAYLOAD = b"." * 100


async def appends(directory: Path, seconds: float) -> float:
    cfg = StrandConfig(storage=directory, segment_bytes=SEGMENT).with_node_name("bench")
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


async def make_log(directory: Path, entries: int) -> None:
    cfg = StrandConfig(storage=directory, segment_bytes=SEGMENT, fsync="never")
    strand = await Strand.open(cfg.with_node_name("bench"))
    for _ in range(0, entries, 1000):
        await strand.append_writes([PAYLOAD] * 1000)
    await strand.close()


async def replay(directory: Path) -> float:
    cfg = StrandConfig(storage=directory, segment_bytes=SEGMENT).with_node_name("bench")
    started = time.perf_counter()
    strand = await Strand.open(cfg)
    elapsed = time.perf_counter() - started
    await strand.close()
    return elapsed


def child(args: argparse.Namespace) -> None:
    if args.child == "appends":
        result = asyncio.run(appends(args.dir, args.seconds))
    elif args.child == "make":
        result = asyncio.run(make_log(args.dir, args.entries)) or 0.0
    else:
        result = asyncio.run(replay(args.dir))
    print(json.dumps(result))


def run(source: Path | None, what: str, directory: Path, args: argparse.Namespace) -> float:
    env = {**os.environ, "PYTHONPATH": pythonpath(source or ROOT)}
    cmd = [sys.executable, __file__, "--child", what, "--dir", str(directory)]
    cmd += ["--seconds", str(args.seconds), "--entries", str(args.entries)]
    done = subprocess.run(
        cmd, env=env, cwd=Path(__file__).parent, capture_output=True, text=True, check=True
    )
    return float(json.loads(done.stdout.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="version A's tree (none: B only)")
    parser.add_argument("--entries", type=int, default=300_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", choices=("appends", "make", "replay"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    sources: dict[str, Path | None] = {"B": None}
    if args.against:
        sources = {"A": args.against, "B": None}
    rounds: dict[str, dict[str, list[float]]] = {s: {"appends": [], "replay": []} for s in sources}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        log = Path(tmp) / "log"
        run(None, "make", log, args)
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
