"""What a producer's background ``enqueued`` record costs the producer's
process: a ``lens.record_enqueued`` call each (A: what tasks/forum/tasks/enqueued.py did
before, one task per record, at most 64 at once) against
``forum.tasks.enqueued.EnqueuedRecords`` (B: batches, ``record_enqueued_many``),
in one run, alternating.

Usage: ``python bench/enqueued_bench.py [--records 2000] [--rounds 3]
[--producers 1 8] [--out PATH]``

Starts a ``redis-server`` (AOF, fsync always). ``--producers`` coroutines
each await a 1 ms sleep (standing for the enqueue's node write) then note a
record, until ``--records`` are noted; then the writer is closed (every
record written). Reports client CPU per record (``time.process_time``, the
producers' own loop cost, ``none``, subtracted) and the wall time, medians.
Prints a table; writes JSON to ``bench/results/enqueued_bench.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from http_bench import redis_server
from report import write_report

from forum.coordinator import Lens
from forum.tasks.enqueued import EnqueuedRecords

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "enqueued_bench.json"
Note = Callable[[int], Awaitable[None]]


def fields() -> dict[str, str | float]:
    now = time.time()
    return {"state": "enqueued", "task": "noop", "due": now, "updated": now}


async def none(lens: Lens, records: int, producers: int) -> None:
    async def note(i: int) -> None:
        return None

    await produce(note, records, producers)


async def each(lens: Lens, records: int, producers: int) -> None:
    room = asyncio.Semaphore(64)
    pending: set[asyncio.Task[bool]] = set()

    def done(task: asyncio.Task[bool]) -> None:
        pending.discard(task)
        room.release()

    async def note(i: int) -> None:
        await room.acquire()
        task = asyncio.create_task(lens.record_enqueued(f"a{i}", fields(), 86400))
        pending.add(task)
        task.add_done_callback(done)

    await produce(note, records, producers)
    if pending:
        await asyncio.wait(set(pending))


async def batched(lens: Lens, records: int, producers: int) -> None:
    writer = EnqueuedRecords(lens)

    async def note(i: int) -> None:
        await writer.note(f"b{i}", fields(), 86400, background=True)

    await produce(note, records, producers)
    await writer.aclose()


#: Runs so far: each run's keys are new ones (a key with a record costs less).
_RUNS = iter(range(1_000_000))


async def produce(note: Note, records: int, producers: int) -> None:
    start = next(_RUNS) * records
    numbers = iter(range(start, start + records))

    async def producer() -> None:
        for i in numbers:
            await asyncio.sleep(0.001)
            await note(i)

    await asyncio.gather(*(producer() for _ in range(producers)))


WAYS = {"none": none, "A each": each, "B batched": batched}


async def measure(records: int, rounds: int, producers: list[int]) -> dict[str, dict[str, list]]:
    found: dict[str, dict[str, list]] = {}
    with tempfile.TemporaryDirectory(prefix="enqueued-bench-") as root:
        async with redis_server(Path(root), "always") as (url, _), Lens.from_url(url) as lens:
            await lens.ping()
            for count in producers:
                for _ in range(rounds):
                    for way, run in WAYS.items():
                        cpu, wall = time.process_time(), time.perf_counter()
                        await run(lens, records, count)
                        row = found.setdefault(f"{count} {way}", {"cpu_us": [], "wall_s": []})
                        row["cpu_us"].append((time.process_time() - cpu) / records * 1e6)
                        row["wall_s"].append(time.perf_counter() - wall)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--producers", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    found = asyncio.run(measure(args.records, args.rounds, args.producers))
    print(f"{args.records} background records, median of {args.rounds}; us of client CPU each")
    print(f"{'producers':>9} {'way':>10} {'cpu us':>8} {'- none':>8} {'wall s':>8}")
    medians = {}
    for count in args.producers:
        base = statistics.median(found[f"{count} none"]["cpu_us"])
        for way in WAYS:
            row = found[f"{count} {way}"]
            cpu, wall = statistics.median(row["cpu_us"]), statistics.median(row["wall_s"])
            medians[f"{count} {way}"] = {"cpu_us": cpu, "net_cpu_us": cpu - base, "wall_s": wall}
            print(f"{count:>9} {way:>10} {cpu:>8.0f} {cpu - base:>8.0f} {wall:>8.2f}")
    report = {"records": args.records, "rounds": args.rounds, "runs": found, "median": medians}
    write_report(args.out, report)


if __name__ == "__main__":
    main()
