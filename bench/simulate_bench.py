"""Scale-out by simulation (issue 30): throughput, latency and cost at 1 to
100 replica groups, calibrated first against this repository's measured runs.

Usage: ``.venv-bench/bin/python bench/simulate_bench.py [--quick]
[--groups 1,2,5,10,20,50,100] [--fixed-groups 1,2,5,10,20] [--seed 1]
[--no-failures] [--no-plot] [--out PATH]``

A seeded discrete-event simulation (``bench/simulate/``, one heap of events,
pure Python): G groups of R=3 node processes, producers, workers and the
Lens's Redis masters, each process a single-core CPU queue. The model, its
calibration and what it leaves out are in docs/scaling-simulation.md.

Steps (every run's history is judged by ``forum.deploy.history.check``):

calibration   the measured single-cluster runs (3 / 5 / 7 nodes on one
              shared 2-core machine, 2,000 jobs of 5 ms): the nodes' CPU per
              job, takes per job without and with lending, idle CPU a second,
              the workers' and Redis's CPU per job; each within 15 %
throughput(1) G=1, producers closed on the group's backlog, offering more
              than it takes: the jobs/s it completes
sustained     at each G of ``--groups``, producers open loop at 0.92 x
              throughput(1) per group, the Lens scaled with G: the jobs/s
              completed against 0.9 x G x throughput(1) (the target); again
              with homes by rendezvous alone (k=1) at G = 2, 5, 10, 20, with
              slots by plain rendezvous at G = 20, 50, and
              with the Lens fixed at 1 and at 4 Redis masters
              (``--fixed-groups``): where it saturates
latency       at each G, producers open loop at 1,000 jobs/s per group (~65 %
              of a group's capacity), the Lens scaled with G: p50 / p99
              write-to-claim, takes per job, CPU per job (cost)
failures      at G=5: partitions, node loss with and without its disk, a slow
              node, a Redis failover, a group added and one drained, hot
              slots, bursty producers with delayed jobs and workers on half
              the groups (``--no-failures`` skips them)

Simulated durations are scaled down (seconds, not minutes: 3-3.5 s runs
with a 1.5 s warm-up), and so are the
directory's period (0.5 s) and the workers' cache of it (1 s), as designed.
``--quick``: G = 1, 2, 5, 10 and the failures at G=5, in under a minute.

Writes bench/results/simulate_bench.json and draws
bench/results/simulate_bench.png (matplotlib, from ``.venv-bench``:
scripts/bench-env; ``--no-plot`` without).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path

from simulate.calibration import MEASURED, TOLERANCE, Calibrated, calibrate
from simulate.scenarios import (
    FAILURES,
    SUSTAINED_SHARE,
    latency,
    lens_masters,
    saturated,
    sustained,
)
from simulate.world import Result, simulate

RESULTS = Path(__file__).resolve().parent / "results"
GROUPS = (1, 2, 5, 10, 20, 50, 100)
QUICK_GROUPS = (1, 2, 5, 10)
FIXED_GROUPS = (1, 2, 5, 10, 20)
RENDEZVOUS_GROUPS = (2, 5, 10, 20)
PLAIN_SLOT_GROUPS = (20, 50)


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"groups must be >= 1: {text!r}")
    return values


def _row(result: Result) -> dict[str, object]:
    verdict = result.verdict
    return {
        "groups": result.groups,
        "masters": result.masters,
        "offered": round(result.offered, 1),
        "throughput": round(result.throughput, 1),
        "takes_per_job": round(result.takes_per_job, 4),
        "p50_ms": round(result.p50_ms, 2),
        "p99_ms": round(result.p99_ms, 2),
        "node_ms": round(result.node_ms, 3),
        "worker_ms": round(result.worker_ms, 3),
        "redis_ms": round(result.redis_ms, 3),
        "cost_ms": round(result.cost_ms, 3),
        "redis_peak_busy": round(result.redis_peak, 3),
        "steals": result.steals,
        "misplaced": result.misplaced,
        "directory_writes_per_s": round(result.directory_writes_per_s, 1),
        "events": result.events,
        "verdict": verdict.summary(),
        "valid": verdict.valid,
        "lost": len(verdict.lost),
        "duplicate_effects": len(verdict.duplicate_effects),
        "reruns": verdict.reruns,
    }


def _calibration(seed: int) -> list[dict[str, object]]:
    print("calibration: the measured single-cluster runs (3 / 5 / 7 nodes, 2,000 jobs of 5 ms)")
    print(
        f"{'nodes':>5} {'node ms/job':>17} {'takes unlent':>19} {'takes lent':>17} "
        f"{'idle ms/s':>15} {'worker ms':>15} {'redis ms':>15} {'sim jobs/s':>10}  ok"
    )
    rows: list[dict[str, object]] = []
    for measured in MEASURED:
        c: Calibrated = calibrate(measured, seed=seed)
        m = c.measured
        print(
            f"{m.nodes:>5} {c.node_ms:>7.2f} vs {m.node_ms:<7.2f} {c.takes_unlent:>8.3f} vs "
            f"{m.takes_unlent:<7.3f} {c.takes_lent:>7.3f} vs {m.takes_lent:<6.3f} "
            f"{c.idle_ms_s:>6.1f} vs {m.idle_ms_s:<5.0f} "
            f"{c.worker_ms:>6.2f} vs {m.worker_ms:<5.2f} "
            f"{c.redis_ms:>6.2f} vs {m.redis_ms:<5.2f} {c.jobs_per_s:>10.0f}  "
            f"{'yes' if c.within else 'NO'}"
        )
        rows.append(
            {
                "nodes": m.nodes,
                "measured": asdict(m),
                "simulated": {
                    "node_ms": round(c.node_ms, 3),
                    "takes_unlent": round(c.takes_unlent, 4),
                    "takes_lent": round(c.takes_lent, 4),
                    "idle_ms_s": round(c.idle_ms_s, 1),
                    "worker_ms": round(c.worker_ms, 3),
                    "redis_ms": round(c.redis_ms, 3),
                    "jobs_per_s": round(c.jobs_per_s, 1),
                },
                "errors": {k: round(v, 4) for k, v in c.errors().items()},
                "extra_takes": {
                    "simulated": round(c.takes_unlent - 1, 4),
                    "measured": round(m.takes_unlent - 1, 4),
                },
                "within": c.within,
                "histories": [v.summary() for v in c.verdicts],
            }
        )
    return rows


def _scaling(
    groups: tuple[int, ...], seed: int
) -> tuple[float, list[dict[str, object]], list[dict[str, object]]]:
    thr1 = simulate(saturated(1, seed=seed)).throughput
    offered = SUSTAINED_SHARE * thr1
    print(
        f"\nscaling: R=3, 5 workers (16 slots) a group, homes balanced by the workers' "
        f"registry, slots by rendezvous with bounded loads, 5 ms jobs; throughput(1) = "
        f"{thr1:.0f} jobs/s (G=1, saturated); the Lens scaled with G (one Redis master "
        f"per 0.85 groups at full load)"
    )
    print(
        f"{'G':>4} {'masters':>7} {'offered/s':>9} {'done/s':>8} {'/G.thr(1)':>9} "
        f"{'takes/job':>9} {'p50 ms':>7} {'p99 ms':>7} {'node':>6} {'worker':>6} {'redis':>6} "
        f"{'ms/job':>6} {'dir w/s':>7} {'steals':>6}  history"
    )
    caps: list[dict[str, object]] = []
    lats: list[dict[str, object]] = []
    for g in groups:
        cap = simulate(sustained(g, offered, seed=seed))
        lat = simulate(latency(g, seed=seed))
        ratio = cap.throughput / (g * thr1)
        caps.append(_row(cap) | {"ratio_to_linear": round(ratio, 4)})
        lats.append(_row(lat))
        ok = cap.verdict.valid and lat.verdict.valid
        print(
            f"{g:>4} {cap.masters:>7} {cap.offered:>9.0f} {cap.throughput:>8.0f} {ratio:>9.3f} "
            f"{lat.takes_per_job:>9.4f} {lat.p50_ms:>7.1f} {lat.p99_ms:>7.1f} "
            f"{lat.node_ms:>6.2f} {lat.worker_ms:>6.2f} {lat.redis_ms:>6.2f} {lat.cost_ms:>6.2f} "
            f"{lat.directory_writes_per_s:>7.0f} {lat.steals:>6}  "
            f"{'OK' if ok else 'FAILED'} lost={len(cap.verdict.lost) + len(lat.verdict.lost)}"
        )
    return thr1, caps, lats


def _variant(
    title: str, groups: tuple[int, ...], thr1: float, seed: int, **changes: object
) -> list[dict[str, object]]:
    """The sustained runs with one choice of the model changed."""
    print(f"\nthe same sustained load with {title}")
    rows = []
    for g in groups:
        r = simulate(sustained(g, SUSTAINED_SHARE * thr1, seed=seed).but(**changes))
        ratio = r.throughput / (g * thr1)
        rows.append(_row(r) | {"ratio_to_linear": round(ratio, 4)})
        print(
            f"  G={g:>3}: {r.throughput:>8.0f} jobs/s = {ratio:.3f} x G x throughput(1), "
            f"p99 {r.p99_ms:.0f} ms, steals {r.steals}, {'OK' if r.verdict.valid else 'FAILED'}"
        )
    return rows


def _fixed(groups: tuple[int, ...], thr1: float, seed: int) -> dict[str, list[dict[str, object]]]:
    print("\nthe same sustained load with the Lens fixed (Redis peak: the busiest master's share)")
    out: dict[str, list[dict[str, object]]] = {}
    for masters in (1, 4):
        rows = []
        for g in groups:
            r = simulate(sustained(g, SUSTAINED_SHARE * thr1, masters=masters, seed=seed))
            rows.append(_row(r) | {"ratio_to_linear": round(r.throughput / (g * thr1), 4)})
            print(
                f"  {masters} master(s), G={g:>3}: "
                f"{r.throughput:>8.0f} of {r.offered:>7.0f} jobs/s, "
                f"Redis peak {r.redis_peak:.2f}, p99 {r.p99_ms:.0f} ms, "
                f"{'OK' if r.verdict.valid else 'FAILED'}"
            )
        out[str(masters)] = rows
    return out


def _failures(seed: int) -> list[dict[str, object]]:
    print("\nfailures at G=5 (1,000 jobs/s per group; window 1.5-4 s, faults from 2 s)")
    rows = []
    for name, cfg in FAILURES:
        r = simulate(cfg.but(seed=seed))
        rows.append({"scenario": name} | _row(r))
        print(
            f"  {name:<50} {r.throughput:>6.0f}/s p99 {r.p99_ms:>6.0f} ms "
            f"takes {r.takes_per_job:.4f} misplaced {r.misplaced:>4}  {r.verdict.summary()}"
        )
    return rows


def _plot(
    path: Path,
    thr1: float,
    caps: list[dict[str, object]],
    lats: list[dict[str, object]],
    rendezvous: list[dict[str, object]],
    fixed: dict[str, list[dict[str, object]]],
) -> None:
    import plots  # noqa: PLC0415 (matplotlib: in .venv-bench only)

    def xy(rows: list[dict[str, object]], key: str) -> tuple[list[float], list[float]]:
        return [float(r["groups"]) for r in rows], [float(r[key]) for r in rows]  # type: ignore[arg-type]

    xs, ys = xy(caps, "throughput")
    throughput = {
        "ideal: G x throughput(1)": (xs, [x * thr1 for x in xs]),
        "target: 0.9 x G x throughput(1)": (xs, [0.9 * x * thr1 for x in xs]),
        "Lens scaled with G": (xs, ys),
        "homes by rendezvous (k=1)": xy(rendezvous, "throughput"),
    }
    for masters, rows in fixed.items():
        throughput[f"Lens fixed: {masters} master(s)"] = xy(rows, "throughput")
    latency_series = {"p99 write-to-claim": xy(lats, "p99_ms"), "p50": xy(lats, "p50_ms")}
    cost = {
        "nodes": xy(lats, "node_ms"),
        "workers": xy(lats, "worker_ms"),
        "Redis": xy(lats, "redis_ms"),
    }
    plots.lines(
        path,
        "Forum replica groups, simulated (R=3, 5 ms jobs; docs/scaling-simulation.md)",
        [
            ("jobs/s completed", throughput),
            ("ms, write to claim", latency_series),
            ("CPU ms per job", cost),
        ],
        "groups (G)",
        log=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="G = 1,2,5,10; under a minute")
    parser.add_argument("--groups", type=_ints, help="the G of the scaling runs")
    parser.add_argument("--fixed-groups", type=_ints, help="the G of the fixed-Lens runs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-failures", action="store_true", help="skip the failure scenarios")
    parser.add_argument("--no-plot", action="store_true", help="draw no PNG (no matplotlib)")
    parser.add_argument("--out", type=Path, default=RESULTS / "simulate_bench.json")
    args = parser.parse_args()
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("matplotlib is not installed here: run from .venv-bench, or --no-plot")
    groups = args.groups or (QUICK_GROUPS if args.quick else GROUPS)
    fixed_groups = args.fixed_groups or (QUICK_GROUPS[:3] if args.quick else FIXED_GROUPS)
    rendezvous_groups = RENDEZVOUS_GROUPS[:2] if args.quick else RENDEZVOUS_GROUPS

    started = time.process_time()
    wall = time.monotonic()
    calibration = _calibration(args.seed)
    thr1, caps, lats = _scaling(groups, args.seed)
    rendezvous = _variant(
        "homes by rendezvous alone (k=1: Poisson-uneven)",
        rendezvous_groups,
        thr1,
        args.seed,
        homes="rendezvous",
    )
    plain = (
        []
        if args.quick
        else _variant(
            "slots by plain rendezvous (equal weights, unbounded)",
            PLAIN_SLOT_GROUPS,
            thr1,
            args.seed,
            slot_table="rendezvous",
        )
    )
    fixed = _fixed(fixed_groups, thr1, args.seed)
    failures = [] if args.no_failures else _failures(args.seed)
    cpu_s = time.process_time() - started
    print(
        f"\nsimulated in {cpu_s:.0f} s of CPU ({time.monotonic() - wall:.0f} s wall, "
        f"load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )

    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_end": os.getloadavg(),
            "cpu_s": round(cpu_s, 1),
        },
        "seed": args.seed,
        "tolerance": TOLERANCE,
        "calibration": calibration,
        "lens_masters": {str(g): lens_masters(g) for g in groups},
        "throughput_1": round(thr1, 1),
        "sustained_share": SUSTAINED_SHARE,
        "sustained": caps,
        "sustained_rendezvous_homes": rendezvous,
        "sustained_plain_rendezvous_slots": plain,
        "latency": lats,
        "fixed_lens": fixed,
        "failures": failures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    if not args.no_plot:
        png = args.out.with_suffix(".png")
        _plot(png, thr1, caps, lats, rendezvous, fixed)
        print(f"drew {png}")


if __name__ == "__main__":
    main()
