"""The benchmarks run end to end (tiny, Forum and Redis only: no peer's
environment, no timing asserted): bench/peers_bench.py and bench/http_bench.py
each leave a complete report."""

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
