"""Instructions per write, take and reliable job of an in-process Forum, per tree.

A load-independent measure (the machine's 2 cores are shared, so rates and
even CPU times swing): each fixed workload runs under ``valgrind
--tool=callgrind`` (every thread counted) on an in-process ``Forum`` with
fsync ``never``, on uvloop, once per tree given, and the instructions of a
run with no operations are subtracted::

    python bench/callgrind_bench.py --tree /tmp/pure --tree /tmp/compiled

==========  ===================================================
phase       what is counted, per operation
==========  ===================================================
write       ``N`` writes by ``--writers`` coroutines
take        ``N`` takes by as many, of those writes
write_opts  ``N`` writes with ``ttl=3600, priority=3`` (issue 14's
            write target compares them with ``write``)
job         ``N`` reliable jobs (write, reserve, ack) by as many
==========  ===================================================

Issue 13's mypyc experiment (branch ``h-mypyc``) used it to ask whether
compiling the node's hot modules would reach the issue's targets. A compiled
tree was made with ``mypyc node/forum/node/core/codec.py node/forum/node/storage/segment.py
node/forum/node/space/index.py
node/forum/node/core/entries.py node/forum/node/space/kept_properties.py
node/forum/node/space/schedule.py node/forum/node/storage/strand.py
node/forum/node/space/forum.py`` in a copy (mypyc refuses two things there: the
``asynccontextmanager`` generators of strand's ``_Gate``, which became two
small classes with ``__aenter__``/``__aexit__``, and ``EntryId.__dict__`` in
index's fast tuple maker, which became ``vars(EntryId)``, with the plain
constructors used when the classes are native, since ``object.__new__``
refuses those). Instructions per operation, 20,000 of each by 64 coroutines
(one writer for ``job x1``, 4,000 jobs):

===========================  =======  =======  =========  ======
modules compiled             write    take     job x64    job x1
===========================  =======  =======  =========  ======
none                         73.4 k   171.7 k  294.7 k    356.2 k
codec segment index entries  65.4 k   165.7 k  280.0 k    --
kept_properties schedule
the six and strand, forum    47.6 k   138.3 k  229.6 k    252.4 k
===========================  =======  =======  =========  ======

A third fewer instructions per write, a fifth per take and per job on the
in-process path, but no target flips: the 64-writer durable write is bound by more than
the Forum's Python (``node_bench.py --write-path``: 26.4 to 23.8 CPU us per
write at fsync ``always``, 0.14x of the ceiling becomes ~0.16x, not 0.5x), and
a reliable job over the stream spends most of the node's CPU in aiohttp and
the stream's framing, which stay Python (``web_stream`` does not compile:
msgspec ``Struct`` class keywords are lost by mypyc).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from trees import import_from_tree, pythonpath, strays, tree_of_forum

PAYLOAD = b"job/" + b"x" * 96
PHASES = ("write", "write_opts", "take", "job")


async def workload(phase: str, n: int, workers: int) -> None:
    """``n`` operations of ``phase`` by ``workers`` coroutines (``take`` writes first)."""
    # Imported here, from the tree under test alone (trees.import_from_tree).
    import_from_tree()
    from forum.node.core.space import Pattern  # noqa: PLC0415
    from forum.node.space.forum import Forum  # noqa: PLC0415
    from forum.node.storage.strand import Strand, StrandConfig  # noqa: PLC0415

    pattern = Pattern(b"job/")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = StrandConfig().with_storage(Path(tmp)).with_fsync("never")
        async with Forum(await Strand.open(cfg), clock=paced_clock()) as forum:
            per = n // workers

            async def write() -> None:
                for _ in range(per):
                    await forum.write(PAYLOAD)

            async def write_opts() -> None:
                for _ in range(per):
                    await forum.write(PAYLOAD, ttl=3600, priority=3)

            async def take() -> None:
                for _ in range(per):
                    if await forum.take(pattern) is None:
                        raise SystemExit("callgrind_bench: a take found nothing")

            async def job() -> None:
                for _ in range(per):
                    await forum.write(PAYLOAD)
                    reserved = await forum.reserve(pattern, 30.0)
                    if reserved is None:
                        raise SystemExit("callgrind_bench: a reserve found nothing")
                    await forum.ack(reserved.id)

            steps = {"write": (write,), "write_opts": (write_opts,), "take": (write, take)}
            for step in steps.get(phase, (job,)):
                await asyncio.gather(*(step() for _ in range(workers)))


def paced_clock(step: float = 8e-6) -> Callable[[], float]:
    """A wall clock that moves ``step`` seconds each time it is read: under
    callgrind a read of the real one sees the program run ~50 times slower,
    so writes that share their expiry's millisecond at full speed (and so
    one Properties object) would not."""
    start = time.time()
    reads = itertools.count()
    return lambda: start + next(reads) * step


def instructions(tree: Path, phase: str, n: int, workers: int) -> int:
    """The instructions callgrind counts for one workload process on ``tree``."""
    env = {**os.environ, "PYTHONPATH": pythonpath(tree), "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
            sys.executable, __file__, "--workload", phase, str(n), str(workers),
        ]  # fmt: skip
        # Run from a directory with no packages: the tree's come from PYTHONPATH.
        done = subprocess.run(
            command, check=False, env=env, cwd=tmp, capture_output=True, text=True
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode or found is None:
        raise SystemExit(f"callgrind_bench: {phase} on {tree} failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_op(tree: Path, n: int, workers: int) -> dict[str, float]:
    """Instructions per operation of each phase on ``tree``."""
    base = instructions(tree, "write", 0, workers)
    totals = {phase: instructions(tree, phase, n, workers) for phase in PHASES}
    return {
        "write": (totals["write"] - base) / n,
        "write_opts": (totals["write_opts"] - base) / n,
        "take": (totals["take"] - totals["write"]) / n,
        "job": (totals["job"] - base) / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append", required=False, default=[])
    parser.add_argument("--ops", type=int, default=20_000, help="operations per phase")
    parser.add_argument("--writers", type=int, default=64, help="coroutines")
    parser.add_argument("--workload", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.workload:
        import uvloop  # noqa: PLC0415

        phase, n, workers = args.workload
        uvloop.run(workload(phase, int(n), int(workers)))
        if stray := strays(tree_of_forum()):
            raise SystemExit(f"callgrind_bench: imported from another tree: {', '.join(stray)}")
        return
    trees = args.tree or [Path(__file__).resolve().parent.parent]
    print(f"instructions per operation, {args.ops} by {args.writers} coroutines, fsync never")
    print(f"{'tree':<40}" + "".join(f"{phase:>12}" for phase in PHASES))
    for tree in trees:
        row = per_op(tree.resolve(), args.ops, args.writers)
        print(f"{tree!s:<40}" + "".join(f"{row[p] / 1000:>11.1f}k" for p in PHASES), flush=True)


if __name__ == "__main__":
    main()
