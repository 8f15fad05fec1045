"""Peak memory of a real ``forum serve`` under concurrent maximum batches,
this checkout (its body budget) against a baseline (none).

Usage: ``python bench/body_budget_bench.py [--batches 16] [--batch-mib 60]
[--rounds 2] [--baseline main] [--budget-mib 256] [--transport http|stream]
[--out PATH]``

Each round starts, for each source in turn (the order alternates from round
to round), a fresh ``forum serve --fsync never`` from that source
(``PYTHONPATH``; its data on tmpfs when ``/dev/shm`` is there, so the disk
is not what is measured) and sends it ``--batches`` batch writes of
``--batch-mib`` MiB each, all at once, in msgpack, over HTTP or with
``--transport stream`` as ``write_many`` frames of the stream (each batch on
a connection of its own, as separate clients would). A 503 ``busy`` (the budget
found no room within its wait) is sent again after its ``Retry-After``, and
counted. Figures, per source, medians over rounds:

before     RSS of the idle node before the writes (``VmRSS``)
peak       its peak RSS over the run (``VmHWM``: the kernel's high-water mark)
after      RSS once the node is idle again, every batch written
live       the payload bytes written (all live: nothing takes them)
over       peak - before - live: what the writes cost beyond the payload
           they leave (bodies, decoded payloads and records in flight)
seconds    from the first request to the last answer

The issue's figure (16 x 60 MiB): a peak of 2.2 GiB for 960 MiB of payload.
The claim checked: with the budget, ``over`` stays within a small multiple of
``body_budget`` (docs/operations.md states the bound), where without it it
grows with the number of batches in flight.

Prints a table; writes JSON to ``bench/results/body_budget_bench.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from memory_bench import steady_rss  # noqa: E402
from trees import export, pythonpath  # noqa: E402

from forum.deploy.processes import NodeService  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "body_budget_bench.json"
MiB = 1024 * 1024
#: Each batch is this many payloads (each under the default max_payload of 1 MiB).
PER_BATCH = 60


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def batch_body(batch_mib: int) -> tuple[bytes, int]:
    """One batch write's msgpack body of about ``batch_mib`` MiB, and its payload bytes."""
    size = batch_mib * MiB // PER_BATCH - 64
    payloads = [(b"big/%04d/" % i).ljust(size, b"x") for i in range(PER_BATCH)]
    return msgspec.msgpack.encode({"payloads": payloads}), size * PER_BATCH


async def send_all(url: str, body: bytes, batches: int, transport: str) -> tuple[int, float]:
    """Every batch at once; how many 503s were sent again, and the seconds taken."""
    retried = 0
    headers = {"Content-Type": "application/msgpack"}
    timeout = aiohttp.ClientTimeout(total=600)
    frame = b"\x93\x01\xaawrite_many" + body  # [1, "write_many", {"payloads": [...]}]

    async def over_http(http: aiohttp.ClientSession) -> int:
        async with http.post(
            f"{url}/v1/tuples/batch", data=io.BytesIO(body), headers=headers
        ) as response:
            await response.read()
            return response.status

    async def over_stream(http: aiohttp.ClientSession) -> int:
        async with http.ws_connect(f"{url}/v1/stream", max_msg_size=0) as ws:
            await ws.send_bytes(frame)
            _, status, _ = msgspec.msgpack.decode((await ws.receive()).data)
            return int(status)

    async def one() -> None:
        nonlocal retried
        # A connection each: separate clients, not one pipelined connection.
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while (
                status := await (over_http if transport == "http" else over_stream)(http)
            ) != 201:
                if status != 503:
                    raise RuntimeError(f"a batch answered {status}")
                retried += 1
                await asyncio.sleep(1)  # Retry-After

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(batches):
            group.create_task(one())
    return retried, time.perf_counter() - started


async def one_run(
    source: Path, args: argparse.Namespace, body: bytes, live: int, flags: list[str]
) -> dict[str, Any]:
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as root:
        node = NodeService(
            "budget",
            Path(root),
            ["--fsync", "never", *flags],
            env={"PYTHONPATH": pythonpath(source)},
        )
        await node.start()
        try:
            assert node.pid is not None
            before = await steady_rss(node.pid)
            retried, seconds = await send_all(node.url, body, args.batches, args.transport)
            after = await steady_rss(node.pid)
            peak = peak_rss(node.pid)
        finally:
            await node.stop()
    return {
        "before": before,
        "peak": peak,
        "after": after,
        "live": live,
        "over": peak - before - live,
        "retried": retried,
        "seconds": round(seconds, 3),
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    body, live = batch_body(args.batch_mib)
    budget = ["--body-budget", f"{args.budget_mib}MiB"]
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "budget": []}
    with tempfile.TemporaryDirectory() as scratch:
        sources = {"baseline": (export(args.baseline, Path(scratch)), []), "budget": (ROOT, budget)}
        for round_ in range(args.rounds):
            order = list(sources) if round_ % 2 == 0 else list(reversed(sources))
            for name in order:
                source, flags = sources[name]
                run = await one_run(source, args, body, live * args.batches, flags)
                runs[name].append(run)
                print(f"round {round_ + 1} {name}: {run}", file=sys.stderr)
    return {
        "batches": args.batches,
        "batch_mib": args.batch_mib,
        "body_budget_mib": args.budget_mib,
        "transport": args.transport,
        "baseline": args.baseline,
        "rounds": args.rounds,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "median": {name: medians(r) for name, r in runs.items()},
        "runs": runs,
    }


def table(report: dict[str, Any]) -> str:
    lines = [
        f"{report['batches']} concurrent batches of {report['batch_mib']} MiB "
        f"over {report['transport']}, "
        f"body_budget {report['body_budget_mib']} MiB, medians of {report['rounds']} rounds",
        f"{'':10}{'before':>10}{'peak':>10}{'after':>10}{'live':>10}{'over':>10}"
        f"{'503s':>6}{'s':>8}",
    ]
    for name, row in report["median"].items():
        mib = {k: row[k] / MiB for k in ("before", "peak", "after", "live", "over")}
        lines.append(
            f"{name:10}{mib['before']:>10.0f}{mib['peak']:>10.0f}{mib['after']:>10.0f}"
            f"{mib['live']:>10.0f}{mib['over']:>10.0f}{row['retried']:>6.0f}{row['seconds']:>8.2f}"
        )
    lines.append("(MiB; over = peak - before - live)")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--batch-mib", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", default="main")
    parser.add_argument("--budget-mib", type=int, default=256)
    parser.add_argument("--transport", choices=("http", "stream"), default="http")
    parser.add_argument("--out", type=Path, default=RESULTS)
    arguments = parser.parse_args()
    result = asyncio.run(main(arguments))
    print(table(result))
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(result, indent=2) + "\n")
