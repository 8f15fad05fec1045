"""Groups of real ``forum serve`` processes under one cluster map."""

from __future__ import annotations

from collections.abc import Sequence

from forum.node.cluster.map import ClusterMap, load_map
from tests.fixtures.nodes import ForumNodes, NodeProcess


async def start_groups(
    forum_nodes: ForumNodes, sizes: Sequence[int], *args: str, epoch: int = 1
) -> tuple[ClusterMap, dict[str, list[NodeProcess]]]:
    """Groups ``g1``.. of ``sizes`` nodes each, every node started with the
    map (written to ``cluster-map.toml`` under the nodes' root)."""
    forum_nodes.root.mkdir(parents=True, exist_ok=True)
    path = forum_nodes.root / "cluster-map.toml"
    groups = {
        f"g{n + 1}": [
            forum_nodes.make(f"g{n + 1}n{m + 1}", "--cluster-map", str(path), *args)
            for m in range(size)
        ]
        for n, size in enumerate(sizes)
    }
    lines = [f"epoch = {epoch}"]
    for gid, nodes in groups.items():
        members = ", ".join(f'"http://127.0.0.1:{node.port}"' for node in nodes)
        lines += ["[[groups]]", f'id = "{gid}"', f"members = [{members}]"]
    path.write_text("\n".join(lines) + "\n")
    await forum_nodes.start_all()
    return load_map(path), groups
