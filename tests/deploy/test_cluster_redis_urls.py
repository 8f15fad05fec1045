"""``forum cluster demo --redis URL`` takes every Redis URL a worker takes: a
primary found through Sentinel, and a Redis Cluster (forum.coordinator.redis_url)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forum.deploy.cluster import Cluster, ClusterConfig
from tests.fixtures.cli import run_forum
from tests.fixtures.redis_server import SENTINEL_SERVICE, RedisClusterServers, RedisServer

JOBS = 30


async def _demo(redis: str, root: Path) -> str:
    code, out, err = await run_forum(
        "cluster", "demo", "--redis", redis, "--nodes", "1", "--workers", "1",
        "--jobs", str(JOBS), "--deadline", "40", "--root", str(root),
    )  # fmt: skip
    assert code == 0, out + err[-3000:]
    assert f"OK: attempted={JOBS} acknowledged={JOBS} done={JOBS} lost=0" in out, out
    assert "duplicate_effects=0" in out, out
    return out


@pytest.mark.slow
async def test_the_demo_runs_on_a_primary_found_through_sentinel(
    redis_sentinel: tuple[RedisServer, RedisServer, RedisServer], tmp_path: Path
) -> None:
    _, _, sentinel = redis_sentinel
    await _demo(f"redis+sentinel://127.0.0.1:{sentinel.port}/{SENTINEL_SERVICE}", tmp_path)


@pytest.mark.slow
async def test_the_demo_runs_on_a_redis_cluster(
    redis_cluster: RedisClusterServers, tmp_path: Path
) -> None:
    await _demo(redis_cluster.url, tmp_path)


@pytest.mark.parametrize(
    ("redis", "sink"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1"),
        ("redis://:pw@127.0.0.1:6379", "redis://:pw@127.0.0.1:6379/1"),
        ("redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/forum",
         "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/forum/1"),
        ("redis+sentinel://10.0.0.1:26379/forum/0", "redis+sentinel://10.0.0.1:26379/forum/1"),
        ("redis+cluster://10.0.0.1:7000,10.0.0.2:7000/",
         "redis+cluster://10.0.0.1:7000,10.0.0.2:7000/"),
        ("unix:///run/redis.sock?db=0", "unix:///run/redis.sock?db=1"),
    ],
)  # fmt: skip
def test_the_effects_go_to_another_database_of_the_same_redis(
    redis: str, sink: str, tmp_path: Path
) -> None:
    """A Cluster has only database 0: the sink's keys (their own hash tag) sit there."""
    assert Cluster(ClusterConfig(redis=redis, root=tmp_path)).sink_url == sink


@pytest.mark.parametrize(
    ("redis", "message"),
    [
        ("localhost:6379", "redis must be 'auto' or a redis:// URL"),
        ("redis+sentinel://10.0.0.1:26379/", "name the primary"),
        ("redis+cluster://10.0.0.1:7000/3", "only database 0"),
    ],
)
def test_a_url_no_worker_takes_is_refused(redis: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterConfig(redis=redis)


def test_chaos_needs_one_redis_server() -> None:
    with pytest.raises(ValueError, match="proxy before one Redis server"):
        ClusterConfig(redis="redis+cluster://10.0.0.1:7000/", chaos=True)
    ClusterConfig(redis="redis://10.0.0.1:6379/0", chaos=True)
