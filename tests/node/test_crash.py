"""Kill -9 at random points: every acknowledged write and take survives."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forum.node.core.entries import Entry, EntryId, Take, Write
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig

ROOT = Path(__file__).resolve().parents[2]


def _run_and_kill(directory: Path, rng: random.Random, options: tuple[str, ...]) -> list[str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.node.crash_writer", str(directory), *options],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 20
    # Wait for the first acknowledgement, then kill at a random moment after it.
    first = child.stdout.readline()
    assert first, "the writer died before writing"
    lines.append(first)
    time.sleep(rng.uniform(0.0, 0.15))
    os.kill(child.pid, signal.SIGKILL)
    rest, _ = child.communicate(timeout=deadline - time.monotonic())
    lines.extend(rest.splitlines(keepends=True))
    # A line cut short by the kill was never acknowledged to anyone.
    return [line for line in lines if line.endswith("\n")]


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        (),
        # Small segments and a checkpoint every 5 ms: kills land in rolls and
        # MANIFEST writes, and the reopen finds no damage where there is none.
        ("4096", "always", "0.005"),
        ("4096", "interval", "0.005"),
    ],
    ids=["default", "rolls-always", "rolls-interval"],
)
async def test_acknowledged_writes_and_takes_survive_sigkill(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed={seed}")
    rng = random.Random(seed)
    directory = tmp_path / "strand"
    acked_writes: dict[EntryId, str] = {}
    acked_taken: set[str] = set()
    for _ in range(12):
        for line in _run_and_kill(directory, rng, options):
            kind, *rest = line.split()
            if kind == "W":
                acked_writes[EntryId.parse(rest[0])] = rest[1]
            else:
                acked_taken.add(rest[0])
        async with Forum(await Strand.open(StrandConfig().with_storage(directory))) as forum:
            live = {t.payload.decode() for t in forum.list(Pattern(b""), limit=10**6).tuples}
            log: list[Entry] = []
            for origin, high in forum.strand.vector().items():
                log.extend(await forum.strand.read_range(origin, 0, high))
        written = {e.id: e.payload.decode() for e in log if isinstance(e, Write)}
        taken = {written[e.target] for e in log if isinstance(e, Take)}
        # Every acknowledged write is in the log, with its payload ...
        for entry_id, payload in acked_writes.items():
            assert written.get(entry_id) == payload, f"lost write {entry_id}"
            # ... and still live, unless a take (acknowledged or not) took it.
            assert payload in live or payload in taken
        # No acknowledged take came back to life.
        assert not (acked_taken & live)
        # Nothing appears that was never written.
        assert live <= set(written.values())
