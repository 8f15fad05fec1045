"""bench/copies_bench.py runs end to end (tiny: three real nodes, a fraction
of a second per cell; no timing asserted) and leaves a complete report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"

pytestmark = pytest.mark.slow


def test_copies_bench_reports_every_cell(tmp_path: Path) -> None:
    out = tmp_path / "copies.json"
    argv = ["--seconds", "0.2", "--rounds", "1", "--copies", "1", "2", "--out", str(out)]
    result = subprocess.run(
        [sys.executable, str(BENCH / "copies_bench.py"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    cells = {(row["copies"], row["clients"]) for row in report["rows"]}
    assert cells == {(1, 1), (1, 16), (2, 1), (2, 16)}
    assert all(row["writes_per_s"] > 0 and row["p99_ms"] >= row["p50_ms"] for row in report["rows"])
