"""``forum cluster`` with replica groups: the map it writes, the nodes it starts
from it, and the operator's add-group / drain-group / retire-group on a running
cluster (forum.deploy.groups)."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from forum.cli import main
from forum.deploy.cluster import Cluster, ClusterConfig
from forum.deploy.groups import MAP_FILE, drain_group, first_map, retire_group, write_map
from forum.node.client.remote import ForumClient
from forum.node.cluster.map import load_map
from forum.node.core.errors import ClusterMapError
from forum.node.core.space import Pattern
from tests.fixtures.nodes import eventually

URLS = [["http://127.0.0.1:7001", "http://127.0.0.1:7002"], ["http://127.0.0.1:7003"]]


def test_nodes_and_groups_together_are_one_line_of_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["cluster", "up", "--nodes", "3", "--groups", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--nodes N is one group of N" in err


def test_the_map_written_is_the_map_read(tmp_path: Path) -> None:
    path = tmp_path / MAP_FILE
    write_map(path, first_map(URLS))
    cluster = load_map(path)
    assert cluster.epoch == 1
    assert [(g.id, g.members, g.state) for g in cluster.groups] == [
        ("g1", tuple(URLS[0]), "active"),
        ("g2", tuple(URLS[1]), "active"),
    ]


async def test_draining_the_last_active_group_or_retiring_an_active_one_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / MAP_FILE
    write_map(path, first_map(URLS))
    with pytest.raises(ClusterMapError, match="drain it first"):
        await retire_group(path, "g1")
    assert drain_group(path, "g1").epoch == 2
    with pytest.raises(ClusterMapError, match="only active group"):
        drain_group(path, "g2")
    with pytest.raises(ClusterMapError, match="no group 'g9'"):
        drain_group(path, "g9")
    assert load_map(path).epoch == 2  # a refused edit leaves the file as it was


def test_add_group_without_a_launcher_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_map(tmp_path / MAP_FILE, first_map(URLS))
    assert main(["cluster", "add-group", "--root", str(tmp_path)]) == 2
    assert "no `forum cluster up --groups` runs" in capsys.readouterr().err


async def _forum(*args: str) -> tuple[int, str]:
    """``forum ARGS`` in a process of its own: its exit code and output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "forum", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode()


async def _epochs(cluster: Cluster) -> set[int | None]:
    epochs = set()
    for node in cluster.nodes:
        async with ForumClient(node.url, timeout=5) as client:
            epochs.add((await client.status()).map_epoch)
    return epochs


@pytest.mark.slow
async def test_groups_come_up_apart_and_follow_the_operators_edits(tmp_path: Path) -> None:
    cfg = ClusterConfig(groups=2, replicas=2, root=tmp_path)
    async with Cluster(cfg) as cluster:
        assert [n.name for n in cluster.nodes] == ["g1-a", "g1-b", "g2-a", "g2-b"]
        for gid, members in cluster.groups.items():
            for node in members:
                async with ForumClient(node.url, timeout=5) as client:
                    status = await client.status()
                assert (status.group, status.map_epoch) == (gid, 1)
                assert {p.url for p in status.peers} == {m.url for m in members if m is not node}

        # add-group: the map gets g3 (epoch 2), the launcher starts its nodes.
        adding = asyncio.create_task(_forum("cluster", "add-group", "--root", str(tmp_path)))
        while not adding.done():
            await cluster.follow_map()
            await asyncio.sleep(0.2)
        code, out = adding.result()
        assert code == 0, out
        assert [n.name for n in cluster.groups["g3"]] == ["g3-a", "g3-b"]
        async with ForumClient(cluster.groups["g3"][0].url, timeout=5) as client:
            assert (await client.status()).group == "g3"
        await eventually(lambda: _is(_epochs(cluster), {2}), timeout=15, what="epoch 2")

        # drain-group g2 holding a job: retire is refused until it is taken.
        g2 = cluster.groups["g2"][0].url
        async with ForumClient(g2, timeout=5) as client:
            await client.write(b"job/left")
            code, out = await _forum("cluster", "drain-group", "g2", "--root", str(tmp_path))
            assert code == 0, out
            code, out = await _forum("cluster", "retire-group", "g2", "--root", str(tmp_path))
            assert code == 2 and "not empty yet" in out and "1 live" in out, out
            assert out.count("\n") == 1
            assert await client.take(Pattern(b"job/")) is not None
        await eventually(lambda: _is(_epochs(cluster), {3}), timeout=15, what="epoch 3")
        async with ForumClient(cluster.groups["g2"][1].url, timeout=5) as other:
            await eventually(lambda: _is(other.count(Pattern(b"")), 0), what="the take replicated")
        code, out = await _forum("cluster", "retire-group", "g2", "--root", str(tmp_path))
        assert code == 0, out
        assert await cluster.follow_map() == ["group g2 retired: its nodes stopped"]
        assert not any(n.running for n in cluster.groups["g2"])
        await eventually(lambda: _is(_epochs(cluster), {4}), timeout=15, what="epoch 4")
        assert [(g.id, g.state) for g in load_map(tmp_path / MAP_FILE).groups] == [
            ("g1", "active"),
            ("g2", "retired"),
            ("g3", "active"),
        ]


async def _is(value: object, expected: object) -> bool:
    assert asyncio.iscoroutine(value)
    return await value == expected


@pytest.mark.slow
async def test_the_demo_writes_each_job_to_its_slots_group_and_loses_none(tmp_path: Path) -> None:
    code, out = await _forum(
        "cluster", "demo", "--groups", "2", "--replicas", "1", "--jobs", "200",
        "--root", str(tmp_path),
    )  # fmt: skip
    assert code == 0, out[-3000:]
    assert "OK: attempted=200 acknowledged=200 done=200 lost=0 unexpected=0" in out
    assert "through 2 nodes in 2 groups" in out
    writes = [int(w) for w in re.findall(r"g\d-a: live=\d+ writes=(\d+)", out)]
    assert len(writes) == 2 and all(writes) and sum(writes) == 200, writes  # both groups wrote
    for worker in ("worker-g1a1", "worker-g2a1"):  # they route by the launcher's map
        started = (tmp_path / worker / f"{worker}.log").read_text().splitlines()[0]
        assert f"--cluster-map {tmp_path / MAP_FILE}" in started
