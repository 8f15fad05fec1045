"""The cluster map of a local cluster of replica groups, and the operator's edits to it.

``forum cluster up --groups G --replicas R`` writes ``cluster-map.toml`` in
the cluster's directory (epoch 1, groups ``g1`` .. ``gG`` of R loopback
members each) and starts every node with ``--cluster-map`` on it. The
operator's commands edit that file: :func:`add_group` appends an active
group, :func:`drain_group` marks one draining, :func:`retire_group` marks one
retired; each raises the epoch by one. The nodes look at the file every 2 s
(forum.node.http.cluster) and take the higher epoch; the launcher that runs
the cluster (:class:`forum.deploy.cluster.Cluster`) starts the nodes of a
group added to it and stops those of a group retired.

A map is written whole to a file beside it and renamed over it, so a node
never reads half of one.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from forum.node.client.remote import ForumClient
from forum.node.cluster.map import ClusterMap, Group, GroupState, load_map
from forum.node.core.errors import ClientError, ClusterMapError

#: The map's file name in the cluster's directory.
MAP_FILE = "cluster-map.toml"


def group_id(n: int) -> str:
    """The id of the ``n``-th group (1-based): ``g1``, ``g2``, ..."""
    return f"g{n}"


def first_map(groups: list[list[str]]) -> ClusterMap:
    """Epoch 1: ``groups[i]``'s URLs form group ``g{i+1}``, all active."""
    return ClusterMap(1, tuple(Group(group_id(n), tuple(urls)) for n, urls in enumerate(groups, 1)))


def to_toml(cluster: ClusterMap) -> str:
    """The map as the TOML a node reads (forum.node.cluster.map's format).
    Every value is written as JSON: a JSON string, number or list of strings
    is the same value in TOML."""
    document = cluster.to_document()
    lines = [f"epoch = {document['epoch']}"]
    for group in document["groups"]:
        lines += ["", "[[groups]]", *(f"{k} = {json.dumps(v)}" for k, v in group.items())]
    return "\n".join(lines) + "\n"


def write_map(path: Path, cluster: ClusterMap) -> None:
    """Write ``cluster`` to ``path`` at once (a whole file renamed over it)."""
    part = path.with_name(path.name + ".part")
    part.write_text(to_toml(cluster))
    os.replace(part, path)


def add_group(path: Path, urls: list[str]) -> Group:
    """Append a new active group of ``urls`` (the next free ``gN``) to the
    map at ``path``, epoch + 1; the group added."""
    cluster = load_map(path)
    taken = {g.id for g in cluster.groups}
    n = 1
    while group_id(n) in taken:
        n += 1
    group = Group(group_id(n), tuple(urls))
    write_map(path, ClusterMap(cluster.epoch + 1, (*cluster.groups, group)))
    return group


def drain_group(path: Path, gid: str) -> ClusterMap:
    """Mark group ``gid`` draining: it takes no new writes, its backlog is
    still served. ``ClusterMapError`` (one line) for an unknown, retired or
    the last active group."""
    cluster = load_map(path)
    group = cluster.group(gid)
    if group.state == "retired":
        raise ClusterMapError(f"group {gid!r} is retired already")
    if group.state == "active" and len(cluster.active) == 1:
        raise ClusterMapError(
            f"group {gid!r} is the only active group: writes would have nowhere to go"
            " (add a group first: forum cluster add-group)"
        )
    return _set_state(path, cluster, gid, "draining")


async def retire_group(path: Path, gid: str) -> ClusterMap:
    """Mark group ``gid`` retired, once it is draining and empty: each of its
    members answers, has taken the map it drains in, and holds no live,
    delayed or reserved tuple. ``ClusterMapError`` (one line) when not: a
    member that does not answer cannot be counted, and one on an older map
    may still be sent writes by a client that learned of nothing newer."""
    cluster = load_map(path)
    group = cluster.group(gid)
    if group.state != "draining":
        raise ClusterMapError(
            f"group {gid!r} is {group.state}: drain it first"
            f" (forum cluster drain-group {gid}), then retire it once empty"
        )
    left = await not_empty(group, cluster.epoch)
    if left:
        raise ClusterMapError(f"group {gid!r} is not empty yet: {left}")
    return _set_state(path, cluster, gid, "retired")


async def not_empty(group: Group, epoch: int) -> str:
    """What keeps ``group`` from being retired at map ``epoch``, member by
    member (``"URL: 3 live, 1 reserved; ..."``); ``""`` when nothing does."""
    left = []
    for url in group.members:
        try:
            async with ForumClient(url, timeout=5) as client:
                status = await client.status()
        except ClientError as exc:
            left.append(f"{url}: no answer ({exc})")
            continue
        counts = {"live": status.live, "delayed": status.delayed, "reserved": status.reserved}
        said = [f"{n} {what}" for what, n in counts.items() if n]
        if status.map_epoch is not None and status.map_epoch < epoch:
            said.append(f"still on map epoch {status.map_epoch} (not {epoch})")
        if said:
            left.append(f"{url}: {', '.join(said)}")
    return "; ".join(left)


def _set_state(path: Path, cluster: ClusterMap, gid: str, state: GroupState) -> ClusterMap:
    groups = tuple(
        dataclasses.replace(g, state=state) if g.id == gid else g for g in cluster.groups
    )
    new = ClusterMap.from_document(ClusterMap(cluster.epoch + 1, groups).to_document(), str(path))
    write_map(path, new)
    return new
