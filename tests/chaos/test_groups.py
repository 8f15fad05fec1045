"""Chaos scenarios of a scaled-out cluster: replica groups under a cluster map.

Each runs ``harness.run_group_scenario``: groups of two nodes, every node
behind a Toxiproxy proxy that the clients reach it through, two keyed
producers (``ClusterClient``), in-process workers at home in different
groups, the demo's effect sink. The fault runs beside the workload; then the
run heals, drains and asserts, as the single cluster's scenarios do:
lost = 0, unexpected = 0, duplicate effects = 0, and each group's nodes hold
the same live set and vector. Marked ``chaos`` (and ``slow``); docs/chaos.md
says what each one shows.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from forum.node.client.cluster import ClusterClient
from forum.node.client.remote import ForumClient
from forum.node.cluster.map import ClusterMap
from forum.node.cluster.slots import slot_of
from forum.node.core.space import Pattern
from tests.chaos.harness import PREFIX, GroupRun, chaos_groups, produce_keyed, run_group_scenario

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(300)]


async def until_produced(run: GroupRun) -> None:
    """Until the run stops producing."""
    while run.producing:
        await asyncio.sleep(0.1)


async def group_writes(run: GroupRun, gid: str) -> int:
    """Writes made on ``gid``'s nodes (each counts the writes it took from clients)."""
    return sum(status.writes for status in await run.group_status(gid))


async def test_a_group_cut_from_the_clients_falls_through_and_drains_when_healed(
    tmp_path: Path,
) -> None:
    """Every proxy before one group's nodes is disabled for a few seconds:
    its keyed writes go to the next group in their slot's order (misplaced,
    counted), the workers go on with the other groups, while a producer
    inside the cut-off side (writing to a node of it directly) leaves a
    backlog there; healed, that backlog drains."""

    async def fault(run: GroupRun) -> None:
        await run.sleep(1.0, 2.0)
        victim = run.rng.choice(list(run.groups))
        async with (
            run.toxiproxy.down(*run.fronts_of(victim)),
            ForumClient(run.groups[victim][0].url) as inside,
        ):
            await run.collect()
            done = sum(1 for n in run.history.effects.values() if n)
            for n in range(20):
                name = f"{PREFIX}inside-{n:03d}"
                await inside.write(name.encode(), key=name)
                run.history.wrote(name, True)
                await run.sleep(0.05, 0.1)
            await run.sleep(0.5, 1.5)
            await run.collect()
            done = sum(1 for n in run.history.effects.values() if n) - done
            backlog = max(s.live for s in await run.group_status(victim))
        print(f"{victim} cut from the clients: {done} jobs done meanwhile, {backlog} left in it")
        assert done > 0, "the workers stopped while one group was cut off"
        assert backlog > 0, "the cut-off group had no backlog"

    run = await run_group_scenario(tmp_path, fault)
    assert sum(p.misplaced for p in run.producers) > 0


async def test_kill_9_of_a_node_of_one_group_and_its_restart(tmp_path: Path) -> None:
    """The node of one group its clients use (its first member: a pool stays
    with the node that answered last) is killed -9 mid-run and started
    again later: the clients fail over to the other member meanwhile, and
    that member serves the jobs the killed one wrote."""

    async def fault(run: GroupRun) -> None:
        await run.sleep(1.0, 2.0)
        node = run.groups[run.rng.choice(list(run.groups))][0]
        node.send_signal(signal.SIGKILL)
        await node.kill()  # reap it
        await run.sleep(1.5, 2.5)
        await node.start()

    await run_group_scenario(tmp_path, fault)


async def test_a_group_added_mid_run_takes_the_writes_of_its_slots(tmp_path: Path) -> None:
    """Two groups, then a third added to the map (epoch 2) and started: the
    producers and workers take the new map, and the writes of the new
    group's slots go to it."""

    async def fault(run: GroupRun) -> None:
        await run.sleep(1.5, 2.5)
        await run.add_group("g3")
        await run.until_clients_have(2)
        await until_produced(run)
        writes = await group_writes(run, "g3")
        print(f"g3 added at epoch 2: {writes} writes made on it")
        assert writes > 0, "no write went to the added group"

    await run_group_scenario(tmp_path, fault, groups=2, homes=("g1", "g2"))


async def test_a_group_drained_then_retired_mid_run(tmp_path: Path) -> None:
    """g2 is drained (state "draining", epoch + 1) mid-run: once every client
    routes by that map no write lands in it, and its backlog is stolen by the
    workers (none is at home there) until it is empty; then it is retired
    (epoch + 1), and its nodes are stopped once the producers are done."""

    async def fault(run: GroupRun) -> None:
        await run.sleep(1.0, 2.0)
        run.set_state("g2", "draining")
        await run.until_clients_have(run.epoch)
        await asyncio.sleep(0.5)  # a write sent before a client took the map has landed
        writes = await group_writes(run, "g2")
        until = time.monotonic() + 60
        while any(s.live or s.reserved for s in await run.group_status("g2")):
            assert time.monotonic() < until, "the draining group's backlog was not stolen"
            await asyncio.sleep(0.2)
        run.set_state("g2", "retired")
        await run.until_clients_have(run.epoch)
        print(
            f"g2: {writes} writes before every client had the draining map, emptied "
            f"and retired {'while' if run.producing else 'after'} producing"
        )
        await until_produced(run)
        assert await group_writes(run, "g2") == writes, "a write landed in the draining group"
        for node in run.groups["g2"]:
            await node.stop()

    # Long enough for the producers to take both maps while they produce.
    await run_group_scenario(tmp_path, fault, homes=("g1", "g3"), produce_for=12.0)


class StaleClusterClient(ClusterClient):
    """A producer that never takes a newer map: not from its refresh, not
    from the epoch the answers name."""

    def take_map(self, cluster: ClusterMap) -> bool:
        return False


async def test_a_producer_with_a_stale_map_writes_to_non_owners_run_once(
    tmp_path: Path,
) -> None:
    """A third producer routes by a map from before g3 (epoch 0: g1 and g2)
    and ignores every newer one, so the jobs of g3's slots land in g1 or g2.
    A producer with the nodes' map writes every one of its jobs too (the same
    name and key): their copies are in two groups, and each job's effect is
    applied once, under one claim, never rerun. The nodes count the stale
    producer's writes outside their slots' groups as misplaced, and only those."""
    stale_names: list[str] = []
    misplaced: list[str] = []

    async def fault(run: GroupRun) -> None:
        current = run.cluster_map()
        old = ClusterMap(0, current.groups[:2])
        async with (
            StaleClusterClient(old, client_id="stale", map_refresh=1e9) as stale,
            ClusterClient(current, client_id="current") as fresh,
        ):
            await produce_keyed(run, "stale", stale, fresh)
            assert stale.map.epoch == 0
        stale_names.extend(n for n in run.history.attempted if "/stale-" in n)
        misplaced.extend(
            n for n in stale_names if old.owner(slot_of(n)) != current.owner(slot_of(n))
        )
        print(f"stale producer: {len(misplaced)} of {len(stale_names)} jobs to a non-owner")
        assert misplaced, "no stale write went to a group that does not own its slot"

    async def after(run: GroupRun) -> None:
        counted = [s.misplaced_writes for gid in run.groups for s in await run.group_status(gid)]
        assert sum(counted) == len(misplaced), f"the nodes counted {counted} misplaced writes"

    run = await run_group_scenario(tmp_path, fault, after=after)
    assert stale_names
    assert not [n for n in stale_names if run.history.reruns[n]], "a copy ran again"


async def test_compaction_is_held_back_only_in_the_group_with_a_member_down(
    tmp_path: Path,
) -> None:
    """g1's second node is down from the start. After the workload, every
    running node compacts (POST /v1/compact): g2's and g3's Strands shrink to
    about their (empty) backlog, while g1's live node drops nothing, since
    its down member lacks every entry; restarted, that member catches up
    (g1 converges) and g1 compacts too."""
    figures: dict[str, tuple[int, int, int]] = {}

    async def prepare(run: GroupRun) -> None:
        await run.groups["g1"][1].stop()

    async def fault(run: GroupRun) -> None:
        await until_produced(run)
        until = time.monotonic() + 60
        while any(await run.live_counts()):  # the backlog is done (g1 by its live node)
            assert time.monotonic() < until, "the backlog was not done"
            await asyncio.sleep(0.2)
        for node in run.nodes:
            if node.running:
                figures[node.name] = await compacted(node.url)
        *_, dropped = figures.pop("g1-a")
        assert dropped == 0, f"g1-a dropped {dropped} entries its down member lacks"
        for name, (held, kept, _) in figures.items():
            assert kept * 4 < held, f"{name} did not compact: {held} -> {kept} bytes"

    async def after(run: GroupRun) -> None:
        # g1's member is back and holds what g1-a holds: now g1 compacts too.
        assert (await compacted(run.groups["g1"][0].url))[2] > 0

    await run_group_scenario(tmp_path, fault, prepare=prepare, after=after, homes=("g2", "g3"))
    print(f"strand bytes before -> after a compaction pass: {figures}")


async def compacted(url: str) -> tuple[int, int, int]:
    """The node's Strand bytes before compaction passes, after them, and the
    entries they dropped. Passes are asked for until one drops entries, for
    a few seconds (the peers' vectors, which say what may go, come with
    anti-entropy)."""
    async with ForumClient(url, timeout=30) as client:
        status = await client.status()
        before, dropped = status.strand_bytes, status.entries_dropped
        until = time.monotonic() + 5
        while not (await client.compact()).entries_dropped and time.monotonic() < until:
            await asyncio.sleep(0.3)
        status = await client.status()
        return before, status.strand_bytes, status.entries_dropped - dropped


async def test_a_writing_client_learns_a_newer_map_from_its_answers(tmp_path: Path) -> None:
    """forum.node.client.cluster: a client with an old map "takes a newer one
    whenever an answer names a higher epoch". A producer that only writes
    (its refresh an hour away) should route by epoch 2 soon after its
    node serves it."""
    async with (
        chaos_groups(tmp_path, 1, 1, ()) as run,
        ClusterClient(run.cluster_map(), client_id="p", map_refresh=3600) as producer,
    ):
        await producer.write(b"job/0", key="0")  # its first call fetches the map once
        run.write_map(2)
        async with ForumClient(run.nodes[0].url, transport="http") as node:
            while node.map_epoch != 2:  # the node took the file (it looks every 2 s)
                await node.status()
                await asyncio.sleep(0.1)
        for n in range(1, 20):
            await producer.write(f"job/{n}".encode(), key=str(n))
            await asyncio.sleep(0.05)
        assert producer.map.epoch == 2


async def test_a_tuple_taken_from_a_killed_writer_keeps_its_key(tmp_path: Path) -> None:
    """A keyed job written on g1-a, pushed to g1-b, and g1-a killed -9 at
    once: g1-b hands the job out with the key it was written with, so every
    copy of it meets one claim key in the Lens (forum.coordinator.envelope)."""
    async with chaos_groups(tmp_path, 1, 2, ()) as run:
        writer, peer = run.nodes
        async with ForumClient(writer.url) as client:
            await client.write(b"job/0", key="k0", copies=2)  # held by both
        writer.send_signal(signal.SIGKILL)
        await writer.kill()
        async with ForumClient(peer.url) as client:
            [job] = await client.reserve_many(Pattern(b"job/"), 30, 1, 10)
        assert job.props.key == b"k0"


def test_the_group_scenarios_are_all_here() -> None:
    """The issue's six faults of a scaled-out cluster each have a scenario."""
    others = (
        "test_the_group_scenarios_are_all_here",
        "test_a_writing_client_learns_a_newer_map",
        "test_a_tuple_taken_from_a_killed_writer",
    )
    names = [n for n in globals() if n.startswith("test_") and not n.startswith(others)]
    assert len(names) == 6
    assert all(asyncio.iscoroutinefunction(globals()[n]) for n in names)
