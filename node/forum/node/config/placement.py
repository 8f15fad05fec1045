"""Where a node sits in a scaled-out cluster: its map and its replica group.

``forum serve --cluster-map map.toml [--group g1]`` reads the map before it
opens anything (a wrong map is one line, and no data directory is made),
finds the node's group (``--group``, else the group whose members include
the node's ``advertise`` URL), and, when no ``--peer`` is given, takes the
group's other members as its peers: replication then runs inside the group
only, as the map says (docs/scaling.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from forum.node.cluster.map import ClusterMap, Group, load_map
from forum.node.config.node import NodeConfig
from forum.node.core.errors import ClusterMapError


@dataclass(frozen=True, slots=True)
class Placement:
    """A node's map (as read at start) and its group in it."""

    map: ClusterMap
    group: Group


def placement(config: NodeConfig) -> Placement | None:
    """The node's placement, ``None`` without a map; ``ClusterMapError`` (one
    line) for a map that cannot be read or does not place the node."""
    if config.cluster_map is None:
        return None
    cluster = load_map(config.cluster_map)
    if config.group is not None:
        group = cluster.group(config.group)
    else:
        found = cluster.group_of(config.advertise_url())
        if found is None:
            raise ClusterMapError(
                f"{config.cluster_map}: no group lists this node's URL {config.advertise_url()}:"
                " give --group, or --advertise as the map spells it"
            )
        group = found
    if group.state == "retired":
        raise ClusterMapError(
            f"{config.cluster_map}: group {group.id!r} is retired: a node of it would serve nothing"
        )
    return Placement(cluster, group)


def placed(config: NodeConfig, where: Placement | None) -> NodeConfig:
    """``config`` with the group's other members as its peers, when it has a
    placement and no peers of its own."""
    if where is None or config.peers:
        return config
    me = config.advertise_url()
    peers = tuple(url for url in where.group.members if url != me)
    return dataclasses.replace(config, peers=peers)
