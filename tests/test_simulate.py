"""The scale-out simulation (bench/simulate/, issue 30) in small worlds: a
seed replays one history; the history checker, run on simulated histories,
reports a tuple a bug lost and an effect the Lens let through twice; the
calibration reproduces the measured 3 / 5 / 7-node runs within 15 %; a few
groups under load complete what they are offered, nothing lost."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from simulate.calibration import MEASURED, TOLERANCE, calibrate  # noqa: E402
from simulate.params import Config, Fault  # noqa: E402
from simulate.world import World, simulate  # noqa: E402


def small(**changes: object) -> Config:
    return Config(groups=2, rate_per_group=300.0, duration=1.5, warmup=0.5, drain=10.0).but(
        **changes
    )


def test_one_seed_replays_one_history() -> None:
    first, again, other = simulate(small()), simulate(small()), simulate(small(seed=2))
    assert first == again
    assert first.events == again.events
    assert (other.events, other.p99_ms) != (first.events, first.p99_ms)


def test_the_checker_reports_a_tuple_a_bug_lost() -> None:
    world = World(small(groups=1))
    for worker in world.workers:  # held back, so that tuples wait live
        worker.stopped = True
    world.start()
    world.sim.run(0.3)
    name = next(n for node in world.groups[0].nodes for n in node.own)
    for member in world.groups[0].nodes:  # a bug drops the tuple on every member
        member.own.pop(name, None)
        member.ready.pop(name, None)
        member._remote_pop(name)
        member.taken.add(name)
    for worker in world.workers:
        worker.stopped = False
        worker.start()
    world.sim.run(1.0)
    for producer in world.producers:
        producer.producing = False
    world.sim.run(4.0)
    verdict = world.stats.history.check()
    assert name in world.stats.history.acknowledged
    assert verdict.lost == (name,)
    assert not verdict.valid


def test_the_checker_reports_a_second_effect_after_a_completion_and_not_a_rerun() -> None:
    world = World(small(groups=1))
    world.start()
    world.sim.run(2.0)
    done = [j for j in world.lens._jobs.values() if j.name in world.sink.completed]
    first, second = done[0], done[1]
    world.sink.apply(first, token=10**9)  # the Lens handed out a claim on a done job
    assert world.stats.history.check().duplicate_effects == (first.name,)
    master = world.lens.master_of(second)
    world.lens.failover(master, lose=10.0)  # Redis lost the job's state: a rerun
    world.sink.apply(second, token=10**9 + 1)
    verdict = world.stats.history.check()
    assert verdict.reruns == 1
    assert verdict.duplicate_effects == (first.name,)


@pytest.mark.parametrize("measured", MEASURED, ids=lambda m: f"{m.nodes}-nodes")
def test_the_calibration_reproduces_the_measured_runs_within_15_percent(measured: object) -> None:
    calibrated = calibrate(measured, jobs=2000)  # type: ignore[arg-type]
    errors = calibrated.errors()
    assert all(abs(e) <= TOLERANCE for e in errors.values()), errors
    assert all(v.valid for v in calibrated.verdicts)
    assert calibrated.takes_lent == 1.0


def test_a_few_groups_complete_what_they_are_offered_and_lose_nothing() -> None:
    result = simulate(small(groups=3))
    assert result.verdict.valid, result.verdict.explain()
    assert result.verdict.done == result.verdict.acknowledged > 0
    assert result.takes_per_job <= 1.03
    assert result.throughput >= 0.9 * result.offered


def test_a_group_cut_from_its_producers_gets_no_write_and_loses_none() -> None:
    cut = Fault("partition_producers", at=0.5, duration=2.0, group=1)
    result = simulate(small(groups=3, faults=(cut,)))
    assert result.misplaced > 0
    assert result.verdict.valid, result.verdict.explain()
