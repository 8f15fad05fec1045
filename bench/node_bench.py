"""Node-core benchmark: the Strand, the live index and the Forum, on this disk.

Prints a table and writes ``bench/results/node_bench.json``. In one run:

* raw append ceiling: records of one 100-byte entry written by one thread, one
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

``--scheduling`` is issue 14's comparison, a mode of its own rather than a
section of the default run: it fills the index twice per round, each case in
a fresh process (so one's heap and GC state does not bias the other), which
would double a default run that is long already. ``--rounds`` times (default
3), alternating the order of the cases each round, it measures

* the take and read latencies above (exact, 1% prefix, 100% prefix; the index
  step, the whole ``Forum.take``, the read) at ``--live`` live tuples twice:
  *plain*, as above, and *mixed*: the same tuples over ten priorities (-5 to
  4, spread so that every prefix and the exact payloads sampled hold every
  class; written with ``write_many(..., priority=p)`` grouped per priority)
  and one delayed tuple (``delay=3600``: never due during the run) per nine
  live ones, on the same prefixes. Target: each p99 of mixed at most 1.2x
  plain's. The live index is as big in both; the delayed tuples are not in it;
* the Forum write rates above (fsync ``always`` and ``never``, 1 and 64
  writers) with plain writes, with ``ttl=3600, priority=3``, and with
  ``delay=3600``. Target: ttl and priority at least 0.9x plain's rate (the
  delayed writes' ratio is shown, with no target).

``--only latency`` or ``--only writes`` runs one half; ``--against DIR``
runs every case on that version (A) too, alternating A and B, and adds a
table of both sides' figures for the targets (the JSON holds both)::

    python bench/node_bench.py --scheduling --only writes --against /tmp/a --rounds 3

It prints the medians in a table, each row against its target (with the time
the cyclic GC took during each pattern's samples: a full collection over
the heap of a case that keeps more objects lands in its p99), and writes
``bench/results/node_scheduling.json`` (``--out``)::

    python bench/node_bench.py --scheduling --rounds 3 --seconds 2
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trees import import_from_tree, pythonpath

# A round on another tree (--against) imports that tree's Forum.
import_from_tree()

from forum.node.core.entries import EntryId, Tuple  # noqa: E402
from forum.node.core.space import Pattern  # noqa: E402
from forum.node.space.forum import Forum  # noqa: E402
from forum.node.space.index import LiveIndex  # noqa: E402
from forum.node.storage import segment  # noqa: E402
from forum.node.storage.strand import Strand, StrandConfig  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def raw_append_rate(directory: Path, group: int, seconds: float) -> float:
    """Records/s appending records of one 100-byte entry, one fsync per ``group`` records."""
    record, _ = segment.batch([b"x" * 100])
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


@dataclass(frozen=True, slots=True)
class WriteVariant:
    """The options every write of a rate measurement is given."""

    name: str
    ttl: float | None = None
    priority: int = 0
    delay: float | None = None

    @property
    def plain(self) -> bool:
        return self.ttl is None and not self.priority and self.delay is None


PLAIN_WRITES = WriteVariant("plain")
#: The write variants of ``--scheduling``, plain first (the others' ratio is to it).
#: Delayed writes are never live here, so their variant measures no take.
WRITE_VARIANTS = (
    PLAIN_WRITES,
    WriteVariant("ttl_priority", ttl=3600, priority=3),
    WriteVariant("delay", delay=3600),
)


async def forum_rates(
    directory: Path, fsync: str, workers: int, seconds: float, variant: WriteVariant = PLAIN_WRITES
) -> dict[str, float]:
    cfg = StrandConfig().with_storage(directory).with_fsync(fsync)  # type: ignore[arg-type]
    payload = b"job/" + b"x" * 96
    plain, ttl, priority, delay = variant.plain, variant.ttl, variant.priority, variant.delay
    async with Forum(await Strand.open(cfg)) as forum:
        write = forum.write

        async def loop(op: str, stop: float) -> int:
            # Each variant's call as a producer writes it: a functools.partial
            # with keywords would cost the variants ~0.1 us a call more than
            # the plain call (it copies its keywords into a new dict each time).
            n = 0
            while time.perf_counter() < stop:
                if op == "write":
                    if plain:
                        await write(payload)
                    elif delay is None:
                        await write(payload, ttl=ttl, priority=priority)
                    else:
                        await write(payload, delay=delay, ttl=ttl, priority=priority)
                elif await forum.take(Pattern(b"job/")) is None:
                    break
                n += 1
            return n

        out: dict[str, float] = {}
        for op in ("write", "take") if variant.delay is None else ("write",):
            stop = time.perf_counter() + seconds
            t0, cpu0 = time.perf_counter(), time.process_time()
            done = sum(await asyncio.gather(*(loop(op, stop) for _ in range(workers))))
            out[f"{op}_per_s"] = done / (time.perf_counter() - t0)
            # CPU of the whole process (the fsync thread too) per operation.
            out[f"{op}_cpu_us"] = (time.process_time() - cpu0) / max(done, 1) * 1e6
    return out


async def rate_grid(
    base: Path, seconds: float, variant: WriteVariant = PLAIN_WRITES
) -> dict[str, dict[str, float]]:
    """``forum_rates`` at fsync ``always`` and ``never``, 1 and 64 writers."""
    rates = {}
    for fsync in ("always", "never"):
        for workers in (1, 64):
            key = f"{fsync}_c{workers}"
            rates[key] = await forum_rates(base / key, fsync, workers, seconds, variant)
    return rates


def _percentiles(samples: list[float]) -> dict[str, float]:
    samples.sort()
    return {
        "p50_us": samples[len(samples) // 2] * 1e6,
        "p99_us": samples[int(len(samples) * 0.99)] * 1e6,
    }


def _latency_payload(i: int) -> bytes:
    """Payloads b"k/%02d/%08d": prefix b"k/07/" matches 1%; the exact payload 1."""
    return b"k/%02d/%08d" % (i % 100, i)


#: Writes per ``write_many`` when filling the index.
_FILL_BATCH = 10_000
#: The mixed case's priorities (10 classes) and how long its delayed tuples wait.
PRIORITIES = range(-5, 5)
FAR_DELAY = 3600.0


def delayed_for(live: int) -> int:
    """How many delayed tuples the mixed case adds to ``live``: a tenth of all."""
    return live // 9


def _priority(i: int) -> int:
    """Tuple ``i``'s priority in the mixed case: ``(i + i // 100) % 10``
    (-5 to 4), so that every prefix of the bench (each a residue mod 100)
    holds all ten classes, and so do any ten tuples in a row (the exact
    payloads sampled are in a row: one per class, not the lowest few)."""
    return PRIORITIES[(i + i // 100) % len(PRIORITIES)]


async def _fill_plain(forum: Forum, live: int) -> None:
    for start in range(0, live, _FILL_BATCH):
        await forum.write_many(
            [_latency_payload(i) for i in range(start, min(live, start + _FILL_BATCH))]
        )


async def _fill_mixed(forum: Forum, live: int) -> int:
    """``live`` tuples over ten priorities, and one delayed (far in the future,
    same prefixes, same priorities) per nine of them, in log order among
    the rest: a tenth of all the tuples. Returns how many are delayed."""

    async def write(numbers: range, delay: float | None) -> None:
        by_priority: dict[int, list[bytes]] = {}
        for i in numbers:
            by_priority.setdefault(_priority(i), []).append(_latency_payload(i))
        for priority, payloads in by_priority.items():
            await forum.write_many(payloads, priority=priority, delay=delay)

    for start in range(0, live, _FILL_BATCH):
        end = min(live, start + _FILL_BATCH)
        await write(range(start, end), None)
        await write(range(live + delayed_for(start), live + delayed_for(end)), FAR_DELAY)
    delayed = delayed_for(live)
    live_now, delayed_now = await forum.count(Pattern(b"")), forum.stats().delayed
    if (live_now, delayed_now) != (live, delayed):
        raise SystemExit(
            f"mixed fill: {live_now} live, {delayed_now} delayed (want {live}, {delayed})"
        )
    return delayed


async def latency_at_scale(
    directory: Path, live: int, samples: int, *, mixed: bool = False
) -> dict[str, dict[str, float]]:
    """Index-level and whole-take latencies with ``live`` tuples; ``mixed``:
    over ten priorities, with a tenth more delayed (``_fill_mixed``)."""
    cfg = StrandConfig().with_storage(directory).with_fsync("never")
    out: dict[str, dict[str, float]] = {}
    async with Forum(await Strand.open(cfg)) as forum:
        await (_fill_mixed(forum, live) if mixed else _fill_plain(forum, live))
        index: LiveIndex = forum._index  # the step the latency target is about
        # An exact payload matches one tuple: sample a different one each time.
        exact = [_latency_payload(i) for i in range(live // 2, live // 2 + samples)]
        patterns = {
            "exact": exact,
            "prefix_1pct": [b"k/07/"] * samples,
            "prefix_100pct": [b"k/"] * samples,
        }
        for name, prefixes in patterns.items():
            pauses = GcPauses()
            with pauses:
                out[name] = await _sample(forum, index, name, prefixes)
            out[name].update(pauses.figures())
    return out


async def _sample(
    forum: Forum, index: LiveIndex, name: str, prefixes: list[bytes]
) -> dict[str, float]:
    """Read, index take and ``Forum.take`` latencies, one sample per prefix."""
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
        # With its priority, as the Forum puts back a take that failed.
        index.restore(found[0], forum._dress(found[1]))
        t0 = time.perf_counter()
        got = await forum.take(Pattern(prefix))
        forum_takes.append(time.perf_counter() - t0)
        assert got is not None, name
    return {
        **{f"read_{k}": v for k, v in _percentiles(reads).items()},
        **{f"index_take_{k}": v for k, v in _percentiles(index_takes).items()},
        **{f"forum_take_{k}": v for k, v in _percentiles(forum_takes).items()},
    }


class GcPauses:
    """The cyclic GC's collections while it is entered: a pause of one lands
    in a p99 (the more objects the heap tracks, the longer a full one)."""

    def __init__(self) -> None:
        self.full = 0
        self.seconds = 0.0
        self.longest = 0.0
        self._started = 0.0

    def __enter__(self) -> None:
        gc.callbacks.append(self._note)

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._note)

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        self.seconds += took
        self.longest = max(self.longest, took)
        self.full += info["generation"] == 2

    def figures(self) -> dict[str, float]:
        return {"gc_ms": self.seconds * 1e3, "gc_longest_ms": self.longest * 1e3,
                "gc_full": float(self.full)}  # fmt: skip


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
        out.update(_flat(await rate_grid(base, seconds)))
    return out


def _flat(nested: dict[str, dict[str, float]]) -> dict[str, float]:
    """``{"a": {"b": x}}`` as ``{"a.b": x}``: one key per figure, for medians."""
    return {f"{key}.{name}": value for key, row in nested.items() for name, value in row.items()}


def _fresh_round(argv: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Run this script with ``argv`` in a fresh process: the flat figures it prints last."""
    command = [sys.executable, __file__, *argv]
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def write_path(args: argparse.Namespace) -> None:
    """Rounds in fresh processes, A (``--against``) and B alternated; medians."""
    sides = {"B": None} if args.against is None else {"A": args.against, "B": None}
    rounds: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for _ in range(args.rounds):
        for side, tree in sides.items():
            argv = ["--one-round", "--seconds", str(args.seconds), "--loop", args.loop]
            rounds[side].append(_fresh_round(argv, _env_of(tree)))
    medians = {side: _medians(runs) for side, runs in rounds.items()}
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


#: Issue 14's targets: a take's or read's p99 with ten priorities and a tenth
#: of the tuples delayed, at most this times the plain one's; writes with a
#: ttl and a priority, at least this times as fast as plain ones.
LATENCY_RATIO_MAX = 1.2
WRITE_RATIO_MIN = 0.9
LATENCY_CASES = ("plain", "mixed")
PATTERNS = ("exact", "prefix_1pct", "prefix_100pct")
STEPS = ("read", "index_take", "forum_take")
RATE_KEYS = ("always_c1", "always_c64", "never_c1", "never_c64")


def _samples(live: int) -> int:
    """Each sample takes one tuple: keep within the 1% prefix's share."""
    return max(10, min(2000, live // 400))


async def scheduling_round(kind: str, live: int, seconds: float) -> dict[str, float]:
    """One round of ``--scheduling``, flattened: ``latency-plain`` or
    ``latency-mixed`` (the latencies of that case), or ``writes-NAME`` (the
    rate grid with the write variant NAME)."""
    what, _, name = kind.partition("-")
    with tempfile.TemporaryDirectory(dir=RESULTS.parent) as tmp:
        if what == "latency" and name in LATENCY_CASES:
            latencies = await latency_at_scale(
                Path(tmp), live, _samples(live), mixed=name == "mixed"
            )
            return _flat(latencies)
        variant = next((v for v in WRITE_VARIANTS if f"writes-{v.name}" == kind), None)
        if variant is None:
            raise SystemExit(f"node_bench: no scheduling round {kind!r}")
        return _flat(await rate_grid(Path(tmp), seconds, variant))


def scheduling(args: argparse.Namespace) -> None:
    """Rounds in fresh processes: the plain and mixed latencies, then each
    write variant, each group's order turned by one every round (so a drift
    of a busy machine favours none); the medians against the targets. With
    ``--against``, every case runs on version A then on this one (B), the
    order of the two turned each round too, and the targets' figures of
    both are shown side by side after B's table."""
    groups = [
        [f"latency-{case}" for case in LATENCY_CASES],
        [f"writes-{variant.name}" for variant in WRITE_VARIANTS],
    ]
    groups = [group for group in groups if args.only in (None, group[0].partition("-")[0])]
    sides = {"B": _env_of(None)} if args.against is None else {
        "A": _env_of(args.against), "B": _env_of(None)}  # fmt: skip
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        side: {kind: [] for group in groups for kind in group} for side in sides
    }
    for r in range(args.rounds):
        for group in groups:
            turn = r % len(group)
            for kind in group[turn:] + group[:turn]:
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                for side in order:
                    print(f"node_bench: round {r + 1}, {kind}, {side}", file=sys.stderr, flush=True)
                    argv = ["--scheduling-round", kind, "--live", str(args.live)]
                    argv += ["--seconds", str(args.seconds), "--loop", args.loop]
                    runs[side][kind].append(_fresh_round(argv, sides[side]))
    reports = {side: _scheduling_report(args, side_runs) for side, side_runs in runs.items()}
    _print_scheduling(reports["B"])
    if "A" in reports:
        _print_against(reports["A"], reports["B"], args.against)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out = reports["B"] if "A" not in reports else {"against": str(args.against), **reports}
    args.out.write_text(json.dumps(out, indent=2))


def _env_of(tree: Path | None) -> dict[str, str]:
    """The environment of a round on ``tree``'s packages (``None``: this one's)."""
    env = dict(os.environ)
    if tree is not None:  # the other version's packages come first
        env["PYTHONPATH"] = os.pathsep.join([pythonpath(tree), env.get("PYTHONPATH", "")])
    return env


def _scheduling_report(args: argparse.Namespace, runs: dict[str, list[dict[str, float]]]) -> Row:
    medians = {kind: _medians(figures) for kind, figures in runs.items()}
    latency = (
        _latency_rows(medians["latency-plain"], medians["latency-mixed"])
        if "latency-plain" in medians
        else []
    )
    writes = _write_rows(medians) if f"writes-{PLAIN_WRITES.name}" in medians else []
    return {
        "loop": args.loop,
        "live": args.live,
        "delayed": delayed_for(args.live),
        "priorities": list(PRIORITIES),
        "rounds": args.rounds,
        "seconds": args.seconds,
        "targets": {"latency_p99_ratio_max": LATENCY_RATIO_MAX, "write_ratio_min": WRITE_RATIO_MIN},
        "pass": all(row["pass"] for row in latency + writes if row["in_target"]),
        "latency": latency,
        "writes": writes,
        "runs": runs,
    }


def _print_against(a: Row, b: Row, tree: Path) -> None:
    """The targets' figures of A (``tree``) and B side by side."""
    print(f"A ({tree}) against B (this tree), medians of {b['rounds']} rounds each")
    if b["latency"]:
        heads = ("A mixed p99", "B mixed p99", "A ratio", "B ratio")
        print(f"{'':<26}" + "".join(f"{h:>12}" for h in heads))
        for row_a, row_b in zip(a["latency"], b["latency"], strict=True):
            print(
                f"{row_b['pattern'] + ' ' + str(row_b['step']):<26}"
                f"{row_a['mixed_p99_us']:>12.1f}{row_b['mixed_p99_us']:>12.1f}"
                f"{row_a['p99_ratio']:>12.2f}{row_b['p99_ratio']:>12.2f}"
            )
    if b["writes"]:
        print(f"{'':<26}" + "".join(f"{h:>12}" for h in (
            "A us", "B us", "A plain us", "B plain us", "A ratio", "B ratio")))  # fmt: skip
        for row_a, row_b in zip(a["writes"], b["writes"], strict=True):
            print(
                f"{row_b['rate'] + ' ' + str(row_b['variant']):<26}"
                f"{row_a['write_cpu_us']:>12.1f}{row_b['write_cpu_us']:>12.1f}"
                f"{row_a['plain_write_cpu_us']:>12.1f}{row_b['plain_write_cpu_us']:>12.1f}"
                f"{row_a['ratio']:>12.2f}{row_b['ratio']:>12.2f}"
            )


Row = dict[str, Any]


def _latency_rows(plain: dict[str, float], mixed: dict[str, float]) -> list[Row]:
    rows: list[Row] = []
    for pattern in PATTERNS:
        for step in STEPS:
            key = f"{pattern}.{step}"
            ratio = mixed[f"{key}_p99_us"] / plain[f"{key}_p99_us"]
            rows.append({
                "pattern": pattern,
                "step": step,
                **{f"{case}_{q}_us": m[f"{key}_{q}_us"]
                   for case, m in (("plain", plain), ("mixed", mixed)) for q in ("p50", "p99")},
                "p99_ratio": ratio,
                # The GC during the pattern's samples (all three steps), to read the p99s by.
                **{f"{case}_{gc_key}": m[f"{pattern}.{gc_key}"]
                   for case, m in (("plain", plain), ("mixed", mixed))
                   for gc_key in ("gc_ms", "gc_longest_ms", "gc_full")},
                "in_target": True,
                "pass": ratio <= LATENCY_RATIO_MAX,
            })  # fmt: skip
    return rows


def _write_rows(medians: dict[str, dict[str, float]]) -> list[Row]:
    """Per rate key and option variant, its write rate against plain writes'
    (the issue's target names ttl and priority; delayed writes are shown too)."""
    plain = medians[f"writes-{PLAIN_WRITES.name}"]
    rows: list[Row] = []
    for key in RATE_KEYS:
        for variant in WRITE_VARIANTS[1:]:
            m = medians[f"writes-{variant.name}"]
            ratio = m[f"{key}.write_per_s"] / plain[f"{key}.write_per_s"]
            rows.append({
                "rate": key,
                "variant": variant.name,
                "plain_write_per_s": plain[f"{key}.write_per_s"],
                "write_per_s": m[f"{key}.write_per_s"],
                "ratio": ratio,
                "plain_write_cpu_us": plain[f"{key}.write_cpu_us"],
                "write_cpu_us": m[f"{key}.write_cpu_us"],
                "in_target": variant.delay is None,
                "pass": ratio >= WRITE_RATIO_MIN,
            })  # fmt: skip
    return rows


def _verdict(row: Row) -> str:
    return ("pass" if row["pass"] else "FAIL") + ("" if row["in_target"] else " (no target)")


def _print_scheduling(report: Row) -> None:
    rows: list[Row] = report["latency"]
    if rows:
        _print_latency(report)
    rows = report["writes"]
    if rows:
        _print_writes(report)
    print("all within the targets" if report["pass"] else "NOT all within the targets")


def _print_latency(report: Row) -> None:
    rows: list[Row] = report["latency"]
    print(
        f"take/read at {report['live']} live tuples: plain vs {len(PRIORITIES)} priorities "
        f"+ {report['delayed']} delayed; {report['rounds']} rounds, medians ({report['loop']}), us"
    )
    heads = ("plain p50", "plain p99", "mixed p50", "mixed p99", "p99 ratio")
    print(
        f"{'':<26}" + "".join(f"{h:>11}" for h in heads) + f"  <= {LATENCY_RATIO_MAX}"
        "  (gc ms in the pattern's samples, plain / mixed)"
    )
    for row in rows:
        cells = [row[f"{case}_{q}_us"] for case in LATENCY_CASES for q in ("p50", "p99")]
        print(
            f"{row['pattern'] + ' ' + str(row['step']):<26}"
            + "".join(f"{c:>11.1f}" for c in cells)
            + f"{row['p99_ratio']:>11.2f}  {_verdict(row):<6}"
            + f"  {row['plain_gc_ms']:.1f} / {row['mixed_gc_ms']:.1f}"
        )


def _print_writes(report: Row) -> None:
    rows: list[Row] = report["writes"]
    print(
        f"write rate with options vs plain, {report['rounds']} rounds of {report['seconds']} s, "
        "medians (ttl_priority: ttl=3600 priority=3; delay: delay=3600)"
    )
    heads = ("plain/s", "write/s", "ratio", "plain us", "write us")
    print(f"{'':<26}" + "".join(f"{h:>11}" for h in heads) + f"  >= {WRITE_RATIO_MIN}")
    for row in rows:
        print(
            f"{row['rate'] + ' ' + str(row['variant']):<26}"
            f"{row['plain_write_per_s']:>11.0f}{row['write_per_s']:>11.0f}{row['ratio']:>11.2f}"
            f"{row['plain_write_cpu_us']:>11.1f}{row['write_cpu_us']:>11.1f}  {_verdict(row)}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--live", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument(
        "--loop", choices=("uvloop", "asyncio"), default="uvloop",
        help="the event loop (forum serve runs on uvloop; default uvloop)",
    )  # fmt: skip
    parser.add_argument("--write-path", action="store_true", help="only the write path")
    parser.add_argument(
        "--against", type=Path, help="with --write-path or --scheduling: version A's tree"
    )
    parser.add_argument(
        "--only", choices=("latency", "writes"),
        help="with --scheduling: only the latencies, or only the write rates",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="with --write-path or --scheduling")
    parser.add_argument(
        "--scheduling", action="store_true",
        help="only issue 14's comparison: latency with priorities and delays, writes with options",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "node_scheduling.json",
        help="with --scheduling: where the JSON goes (default bench/results/node_scheduling.json)",
    )  # fmt: skip
    parser.add_argument("--one-round", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scheduling-round", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_round:
        print(json.dumps(await write_path_round(args.seconds)))
        return
    if args.scheduling_round:
        print(json.dumps(await scheduling_round(args.scheduling_round, args.live, args.seconds)))
        return
    if args.write_path:
        write_path(args)
        return
    if args.scheduling:
        scheduling(args)
        return
    results: dict[str, object] = {"loop": args.loop}
    with tempfile.TemporaryDirectory(dir=RESULTS.parent) as tmp:
        base = Path(tmp)
        raw = {g: raw_append_rate(base, g, args.seconds) for g in (1, 64)}
        results["raw_append_per_s"] = raw
        rates = await rate_grid(base, args.seconds)
        results["forum"] = rates
        results["latency"] = await latency_at_scale(base / "lat", args.live, _samples(args.live))
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
