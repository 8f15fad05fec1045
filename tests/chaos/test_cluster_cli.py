"""``forum cluster``: the README's main job, end to end through the real command."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

ROOT = Path(__file__).resolve().parents[2]


async def _forum(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "forum", *args,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


@pytest.mark.slow
async def test_cluster_demo_puts_every_job_through_exactly_once(tmp_path: Path) -> None:
    demo = await _forum("cluster", "demo", "--jobs", "300", "--root", str(tmp_path))
    out, err = await asyncio.wait_for(demo.communicate(), 180)
    text = out.decode()
    assert demo.returncode == 0, text + err.decode()[-3000:]
    assert "OK: attempted=300 acknowledged=300 done=300 lost=0 unexpected=0" in text
    assert "duplicate_effects=0" in text
    assert "live 'job/' left per node: [0, 0, 0]" in text
    assert "dashboard" in text and "/ui" in text  # where to watch it


@pytest.mark.slow
async def test_cluster_up_runs_until_interrupted_and_stops_everything(tmp_path: Path) -> None:
    up = await _forum("cluster", "up", "--nodes", "2", "--workers", "1", "--root", str(tmp_path))
    assert up.stdout is not None
    lines = []
    while not any("redis" in line for line in lines):
        line = (await asyncio.wait_for(up.stdout.readline(), 60)).decode()
        assert line, "forum cluster up ended before printing its addresses"
        lines.append(line)
    assert any("node-a" in line and "http://127.0.0.1:" in line for line in lines)
    assert any(line.split()[:1] == ["dashboard"] and "/ui" in line for line in lines)
    # The nodes were given the Lens: the dashboard lists the worker.
    dashboard = next(line.split()[1] for line in lines if line.split()[:1] == ["dashboard"])
    await _until_shown(f"{dashboard}/workers", 'data-worker="worker-a1"')
    up.send_signal(signal.SIGINT)
    await asyncio.wait_for(up.communicate(), 60)
    assert up.returncode == 0
    # Every process it started (all have the root in their command line) is gone.
    ps = await asyncio.create_subprocess_exec(
        "pgrep", "-f", str(tmp_path), stdout=asyncio.subprocess.PIPE
    )
    leftover, _ = await ps.communicate()
    assert leftover.decode().strip() == ""


async def _until_shown(url: str, text: str, deadline: float = 30.0) -> None:
    async with aiohttp.ClientSession() as http, asyncio.timeout(deadline):
        while True:
            async with http.get(url) as answer:
                if text in await answer.text():
                    return
            await asyncio.sleep(0.2)  # a poll with a deadline
