"""Pieces of the worker CLI that need no process: the progress line, the metrics."""

from __future__ import annotations

from prometheus_client.exposition import generate_latest

from forum.cli_worker import progress_line
from forum.coordinator.metrics import worker_registry
from forum.coordinator.stats import WorkerStats


def test_progress_line_names_every_counter() -> None:
    stats = WorkerStats(
        done=12, retried=3, dead=1, double_takes=2, claims_lost=1, running=4, lens_state_losses=1
    )
    line = progress_line("w1", stats)
    assert line == (
        "w1: done 12  retried 3  dead 1  double takes 2  claims lost 1  running 4  redis up  "
        "state losses 1"
    )
    assert "redis DOWN" in progress_line("w1", WorkerStats(lens_reachable=False))


def test_metrics_are_read_from_the_stats_at_scrape_time() -> None:
    stats = WorkerStats(
        taken=9, done=7, double_takes=2, rescued=3, over_limit=4, lens_state_losses=1, running=1
    )
    text = generate_latest(worker_registry(lambda: stats)).decode()
    assert 'forum_worker_jobs_total{outcome="done"} 7.0' in text
    assert 'forum_worker_jobs_total{outcome="double_takes"} 2.0' in text
    assert 'forum_worker_jobs_total{outcome="rescued"} 3.0' in text
    assert 'forum_worker_jobs_total{outcome="over_limit"} 4.0' in text
    assert "forum_worker_lens_state_losses_total 1.0" in text
    assert "forum_worker_taken_total 9.0" in text
    assert "forum_worker_running 1.0" in text
    assert "forum_worker_lens_reachable 1.0" in text
