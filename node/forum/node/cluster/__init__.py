"""Scale-out: replica groups, the cluster map and slot routing (docs/scaling.md).

:mod:`forum.node.cluster.slots` places a key: its slot (``crc32 mod 16384``,
fixed for the cluster's life), the slot's group (weighted rendezvous with
bounded loads) and the balanced homes of workers.
:mod:`forum.node.cluster.map` is the map itself: one small versioned document
naming the groups, their members, weights and states, signed with the
cluster secret. :mod:`forum.node.cluster.directory` is what consumers steal by.
"""
