"""The benchmarks run end to end (tiny, Forum and Redis only: no peer's
environment, no timing asserted): bench/peers_bench.py, bench/http_bench.py
and bench/node_bench.py --scheduling each leave a complete report, and
peers_bench kills a run that overruns its timeout, says so, and goes on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"

pytestmark = pytest.mark.slow


def run(script: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *argv],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )


def test_peers_bench_runs_forum_through_forum_serve(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    done = run("peers_bench.py", "--systems", "forum", "--jobs", "50", "--rounds", "1",
               "--no-plot", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert set(report["concurrency"]) == {"1", "8"}
    for row in report["concurrency"].values():
        assert row["forum"]["jobs"] == 50
        assert row["forum"]["jobs_per_s"] > 0
    assert report["versions"]["forum"]["forum"]


#: A "saq" Python whose versions answer but whose run never ends: it, and a
#: process it started (its pid written to the file in $1), sleep until killed.
HANGING_PYTHON = """#!/bin/sh
if [ "$1" = "-I" ]; then echo '{"saq": "0", "redis": null, "hiredis": null}'; exit 0; fi
sleep 300 &
echo $! > %s
exec sleep 300
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_peers_bench_kills_a_run_past_its_timeout_and_goes_on(tmp_path: Path) -> None:
    python, started = tmp_path / "python", tmp_path / "started.pid"
    python.write_text(HANGING_PYTHON % started)
    python.chmod(0o755)
    out = tmp_path / "peers.json"
    done = run("peers_bench.py", "--systems", "saq", "forum", "--python", f"saq={python}",
               "--jobs", "20", "--rounds", "1", "--concurrency", "1", "--run-timeout", "15",
               "--no-plot", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["timeouts"] == [{"system": "saq", "slots": 1, "round": 1}]
    row = report["concurrency"]["1"]
    assert row["saq"]["jobs_per_s"] is None
    assert row["forum"]["jobs"] == 20  # the run after the one that timed out
    assert row["forum_vs"] == {"saq": None}
    progress = done.stderr.splitlines()
    assert "peers_bench: saq, 1 slot, round 1: timeout (killed after 15 s)" in progress
    assert any(line.startswith("peers_bench: forum, 1 slot, round 1: ") for line in progress)
    assert "timeout" in done.stdout.splitlines()[2]  # the table's row for 1 slot
    assert not alive(int(started.read_text()))  # the whole process group was killed


def test_peers_bench_says_in_one_line_that_a_peer_has_no_environment(tmp_path: Path) -> None:
    done = run("peers_bench.py", "--systems", "saq", "--python", f"saq={tmp_path}/none",
               "--no-plot", "--out", str(tmp_path / "peers.json"))  # fmt: skip
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        == f"peers_bench: saq: no Python at {tmp_path}/none (run scripts/bench-env)"
    )
    assert not (tmp_path / "peers.json").exists()


def test_http_bench_compares_the_reliable_job(tmp_path: Path) -> None:
    out = tmp_path / "http.json"
    done = run("http_bench.py", "--seconds", "0.2", "--repeats", "1", "--clients", "1",
               "--prefill", "20", "--no-plot", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (only,) = json.loads(out.read_text())["runs"]
    assert only["fsync"] == "always"
    measured = {(r["system"], r["work"]) for r in only["results"]}
    works = ("write", "take", "job", "batch job")
    assert measured == {(s, w) for s in ("forum", "redis") for w in works}
    takes = [r for r in only["results"] if r["work"] == "take"]
    assert [r["ops"] for r in takes] == [20, 20]  # each drained its prefill, reserved and acked


def test_node_bench_scheduling_reports_every_row_against_its_target(tmp_path: Path) -> None:
    out = tmp_path / "scheduling.json"
    done = run("node_bench.py", "--scheduling", "--live", "2000", "--seconds", "0.1",
               "--rounds", "1", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert (report["live"], report["delayed"], len(report["priorities"])) == (2000, 222, 10)
    assert report["targets"] == {"latency_p99_ratio_max": 1.2, "write_ratio_min": 0.9}
    patterns, steps = (
        ("exact", "prefix_1pct", "prefix_100pct"),
        ("read", "index_take", "forum_take"),
    )
    latency = report["latency"]
    assert [(r["pattern"], r["step"]) for r in latency] == [(p, s) for p in patterns for s in steps]
    for row in latency:
        assert row["p99_ratio"] == row["mixed_p99_us"] / row["plain_p99_us"]
        assert row["pass"] == (row["p99_ratio"] <= 1.2)
        assert {"plain_gc_ms", "mixed_gc_ms", "plain_gc_full", "mixed_gc_full"} <= set(row)
    rates = ("always_c1", "always_c64", "never_c1", "never_c64")
    writes = report["writes"]
    assert [(r["rate"], r["variant"]) for r in writes] == [
        (rate, variant) for rate in rates for variant in ("ttl_priority", "delay")
    ]
    for row in writes:
        assert row["ratio"] == row["write_per_s"] / row["plain_write_per_s"]
        assert row["pass"] == (row["ratio"] >= 0.9)
        assert row["in_target"] == (row["variant"] == "ttl_priority")
    in_target = [r["pass"] for r in latency + writes if r["in_target"]]
    assert report["pass"] == all(in_target)
    assert {kind: len(runs) for kind, runs in report["runs"].items()} == {
        "latency-plain": 1, "latency-mixed": 1,
        "writes-plain": 1, "writes-ttl_priority": 1, "writes-delay": 1,
    }  # fmt: skip
    table = done.stdout.splitlines()
    assert table[0].startswith(
        "take/read at 2000 live tuples: plain vs 10 priorities + 222 delayed"
    )
    assert [line.split()[:2] for line in table[2:11]] == [[p, s] for p in patterns for s in steps]
    assert table[11].startswith("write rate with options vs plain")
    assert [line.split()[:2] for line in table[13:21]] == [
        [rate, variant] for rate in rates for variant in ("ttl_priority", "delay")
    ]
    assert table[21] in ("all within the targets", "NOT all within the targets")


def test_node_bench_scheduling_runs_one_half_on_two_versions(tmp_path: Path) -> None:
    """``--only writes --against DIR``: the write rates alone, each on version
    A (here this same tree) and B, both reports kept and shown side by side."""
    out = tmp_path / "against.json"
    done = run("node_bench.py", "--scheduling", "--only", "writes", "--against", str(BENCH.parent),
               "--seconds", "0.05", "--rounds", "1", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["against"] == str(BENCH.parent) and {"A", "B"} <= set(report)
    for side in ("A", "B"):
        assert report[side]["latency"] == [] and len(report[side]["writes"]) == 8
        assert set(report[side]["runs"]) == {"writes-plain", "writes-ttl_priority", "writes-delay"}
    table = done.stdout.splitlines()
    assert table[0].startswith("write rate with options vs plain")
    against = table.index(f"A ({BENCH.parent}) against B (this tree), medians of 1 rounds each")
    assert [line.split()[:2] for line in table[against + 2 :]] == [
        [rate, variant]
        for rate in ("always_c1", "always_c64", "never_c1", "never_c64")
        for variant in ("ttl_priority", "delay")
    ]


def test_watch_bench_reports_each_case(tmp_path: Path) -> None:
    out = tmp_path / "watch.json"
    done = run("watch_bench.py", "--writes", "1000", "--rounds", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert set(report["writes_per_s"]) == {"plain", "hub", "hub+10"}
    assert report["http_events_per_s"] > 0
