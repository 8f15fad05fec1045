"""Scale-out: replica groups, the cluster map and slot routing (docs/scaling.md).

:mod:`forum.node.cluster.slots` places a key: its slot (``crc32 mod 16384``,
fixed for the cluster's life) and the groups in weighted rendezvous order.
:mod:`forum.node.cluster.map` is the map itself: one small versioned document
naming the groups, their members, weights and states, signed with the
cluster secret.
"""

from forum.node.cluster.map import ClusterMap, Group, GroupState, load_map
from forum.node.cluster.slots import SLOTS, slot_of

__all__ = ["SLOTS", "ClusterMap", "Group", "GroupState", "load_map", "slot_of"]
