"""The ``forum`` command against a scaled-out cluster: real nodes in two
groups under one map, each command given one node's URL, run as a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import re

import pytest

from forum import ClusterMap, Pattern
from forum.node.client.remote import ForumClient
from forum.node.cluster.map import load_map
from forum.node.cluster.slots import slot_of
from tests.cluster.conftest import start_groups
from tests.fixtures.nodes import ForumNodes
from tests.service.test_cli import FORUM, forum

pytestmark = pytest.mark.slow


def owned_by(cluster: ClusterMap, gid: str) -> str:
    """A job key whose slot group ``gid`` owns."""
    return next(f"k{n}" for n in range(1000) if cluster.owner(slot_of(f"k{n}")).id == gid)


async def test_every_client_command_acts_on_every_group_from_any_node(
    forum_nodes: ForumNodes,
) -> None:
    cluster, groups = await start_groups(forum_nodes, [1, 1, 1])
    g1, g2, g3 = (groups[g][0].url for g in ("g1", "g2", "g3"))
    job = Pattern(b"job/")
    async with ForumClient(g1) as only_g1, ForumClient(g2) as only_g2, ForumClient(g3) as only_g3:
        # A keyed write given g1's node goes to its slot's group.
        for payload, gid in (("job/two", "g2"), ("job/three", "g3")):
            code, _, err = await forum(
                "write", payload, "--key", owned_by(cluster, gid), "--node", g1
            )
            assert (code, err) == (0, "")
        assert [await c.count(job) for c in (only_g1, only_g2, only_g3)] == [0, 1, 1]
        await only_g1.write(b"job/one")

        # count sums over the groups, whichever node it is given.
        for node in (g1, g3):
            assert await forum("count", "job/", "--node", node) == (0, b"3\n", "")

        # read and take find a tuple that is only in another group (of two others).
        assert (await forum("read", "job/two", "--node", g1))[:2] == (0, b"job/two")
        for payload in (b"job/two", b"job/three"):
            assert (await forum("take", payload.decode(), "--node", g1))[:2] == (0, payload)
        assert [await c.count(job) for c in (only_g2, only_g3)] == [0, 0]
        assert (await forum("take", "job/one", "--node", g3))[:2] == (0, b"job/one")
        assert (await forum("take", "job/", "--node", g2))[0] == 1  # nothing left anywhere

        # pause and resume reach every group.
        assert (await forum("pause", "job/", "--node", g2))[0] == 0
        assert [await c.paused() for c in (only_g1, only_g2, only_g3)] == [[b"job/"]] * 3
        code, out, _ = await forum("resume", "job/", "--node", g1)
        assert (code, out) == (0, b"resumed job/ (3 pause(s) ended)\n")

    # map prints the map as a file --cluster-map takes.
    code, out, _ = await forum("map", "--node", g2)
    assert code == 0 and "it is in group g2" in out.decode()
    printed = forum_nodes.root / "printed.toml"
    printed.write_bytes(out)
    assert load_map(printed) == cluster


async def test_status_shows_each_group_its_members_and_the_map_epoch(
    forum_nodes: ForumNodes,
) -> None:
    _, groups = await start_groups(forum_nodes, [2, 1], epoch=7)
    await groups["g1"][1].stop()
    code, out, err = await forum("status", "--node", groups["g2"][0].url)
    assert (code, err) == (0, "")
    text = out.decode()
    assert re.search(r"^map epoch +7$", text, re.M) and re.search(r"^group +g2$", text, re.M)
    rows = {
        line.split()[3]: line.split() for line in text.splitlines() if line[:3] in ("g1 ", "g2 ")
    }
    first, second, other = (n.url for n in (*groups["g1"], *groups["g2"]))
    assert rows[first][:5] == ["g1", "active", "1", first, "g1n1"]
    assert rows[second][:5] == ["g1", "active", "1", second, "unreachable"]
    assert rows[other][:5] == ["g2", "active", "1", other, "g2n1"]
    assert rows[other][5:] == ["0", "0", "alone"]  # live, reserved; no peers in its group


async def test_watch_follows_every_group(forum_nodes: ForumNodes) -> None:
    _, groups = await start_groups(forum_nodes, [1, 1])
    nodes = [groups["g1"][0], groups["g2"][0]]
    async with contextlib.AsyncExitStack() as stack:
        watch = await asyncio.create_subprocess_exec(
            *FORUM, "watch", "job/", "--node", nodes[0].url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stack.push_async_callback(watch.wait)
        stack.callback(_terminate, watch)
        notes, events = watch.stderr, watch.stdout
        assert notes is not None and events is not None
        async with asyncio.timeout(30):
            ready = [(await notes.readline()).decode() for _ in nodes]  # one per group
            assert all("on a member of each of 2 groups" in line for line in ready)
            for node in nodes:
                async with ForumClient(node.url) as client:
                    await client.write(f"job/{node.name}".encode())
            seen = {(await events.readline()).split()[-1] for _ in nodes}
        assert seen == {b"job/g1n1", b"job/g2n1"}
    assert watch.returncode == 0  # SIGTERM: a clean exit


def _terminate(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
