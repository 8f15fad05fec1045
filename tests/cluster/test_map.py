"""The cluster map and slot routing (forum.node.cluster), as pure functions."""

from __future__ import annotations

import json
import zlib
from collections import Counter
from pathlib import Path

import pytest

from forum.coordinator.keys import KeySchema
from forum.node.cluster.map import ClusterMap, load_map
from forum.node.cluster.slots import SLOTS, balanced, group_seed, ranked, slot_of
from forum.node.core.errors import ClusterMapError


def cluster(n: int, epoch: int = 1, **extra: dict[str, object]) -> ClusterMap:
    groups: list[dict[str, object]] = [
        {"id": f"g{i}", "members": [f"http://10.0.{i}.{j}:7000" for j in range(3)]}
        for i in range(n)
    ]
    for gid, fields in extra.items():
        next(g for g in groups if g["id"] == gid).update(fields)
    return ClusterMap.from_document({"epoch": epoch, "groups": groups})


def owners(m: ClusterMap) -> list[str]:
    return [m.owner(s).id for s in range(SLOTS)]


def test_a_key_has_one_fixed_slot_and_the_lens_shard_is_that_slot_mod_its_shards() -> None:

    assert slot_of("order-42") == slot_of("order-42") < SLOTS
    for shards in (1, 16, 1024):
        lens = KeySchema(shards=shards)
        for key in ("a", "order-42", "ünïcode", "x" * 300):
            assert lens.shard(key) == slot_of(key) % shards


def test_every_group_owns_its_share_of_the_slots_to_one() -> None:
    counts = Counter(owners(cluster(10)))
    assert set(counts) == {f"g{i}" for i in range(10)}
    assert max(counts.values()) <= -(-SLOTS // 10)  # none over its share, rounded up
    assert sum(counts.values()) == SLOTS
    plain = Counter(ranked(s, [(f"g{i}", group_seed(f"g{i}"), 1.0) for i in range(10)])[0]
                    for s in range(SLOTS))  # fmt: skip
    assert max(plain.values()) > max(counts.values())  # plain rendezvous is uneven


def test_adding_a_group_moves_about_its_share_of_the_slots_most_of_them_to_it() -> None:
    before, after = owners(cluster(5)), owners(cluster(6))
    moved = [s for s in range(SLOTS) if before[s] != after[s]]
    assert 0.15 < len(moved) / SLOTS < 0.2  # about 1/6
    assert sum(1 for s in moved if after[s] == "g5") > 0.9 * len(moved)


def test_a_group_gets_its_share_of_the_weights() -> None:
    counts = Counter(owners(cluster(3, g0={"weight": 2.0})))
    assert counts["g0"] == SLOTS // 2  # 2 of 4 weights, to the slot


def test_draining_and_retired_groups_own_no_slot_but_draining_ones_are_served() -> None:
    m = cluster(3, g1={"state": "draining"}, g2={"state": "retired", "members": []})
    assert set(owners(m)) == {"g0"}
    assert [g.id for g in m.served] == ["g0", "g1"]
    assert [g.id for g in m.order(7)] == ["g0"]


def test_the_fall_through_order_starts_with_the_owner_and_names_every_active_group() -> None:
    m = cluster(4)
    for slot in (0, 1, 999, SLOTS - 1):
        order = [g.id for g in m.order(slot)]
        assert order[0] == m.owner(slot).id
        assert sorted(order) == ["g0", "g1", "g2", "g3"]


def test_the_signature_covers_the_whole_map() -> None:
    a, b = cluster(2), cluster(2, epoch=2)
    assert a.signature("s") == cluster(2).signature("s")
    assert a.signature("s") != b.signature("s") != b.signature("t")


def test_a_map_round_trips_through_its_document_and_a_json_file(tmp_path: Path) -> None:
    m = cluster(3, g2={"weight": 0.5, "state": "draining"})
    assert ClusterMap.from_document(m.to_document()) == m
    path = tmp_path / "map.json"
    path.write_text(json.dumps(m.to_document()))
    assert load_map(path) == m


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ({"groups": []}, "epoch must be a whole number"),
        ({"epoch": 1, "groups": []}, "groups must be a non-empty list"),
        ({"epoch": 1, "slots": 1024, "groups": [{}]}, "slots is fixed at 16384"),
        ({"epoch": 1, "groups": [{"id": "a b", "members": ["http://h:1"]}]}, "groups[0].id"),
        ({"epoch": 1, "groups": [{"id": "a", "members": ["h:1"]}]}, "groups[0].members"),
        ({"epoch": 1, "groups": [{"id": "a", "members": []}]}, "needs at least one node"),
        ({"epoch": 1, "groups": [{"id": "a", "members": ["http://h:1"], "weight": 0}]}, "weight"),
        ({"epoch": 1, "groups": [{"id": "a", "members": ["http://h:1"], "state": "x"}]}, "state"),
        ({"epoch": 1, "groups": [{"id": "a", "members": ["http://h:1"], "wieght": 1}]}, "unknown"),
        (
            {"epoch": 1, "groups": [{"id": "a", "members": ["http://h:1"], "state": "draining"}]},
            "no group is active",
        ),
        (
            {"epoch": 1, "groups": [{"id": "a", "members": ["http://h:1"]}] * 2},
            "listed twice",
        ),
        (
            {
                "epoch": 1,
                "groups": [
                    {"id": "a", "members": ["http://h:1"]},
                    {"id": "b", "members": ["http://h:1"]},
                ],
            },
            "a member of both",
        ),
    ],
)
def test_a_wrong_map_is_refused_in_one_line_naming_what(document: object, says: str) -> None:
    with pytest.raises(ClusterMapError) as caught:
        ClusterMap.from_document(document, "map.toml")
    message = str(caught.value)
    assert message.startswith("map.toml") and says in message and "\n" not in message


def test_a_missing_or_unparsable_file_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ClusterMapError, match="cannot read the cluster map"):
        load_map(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("epoch = \n")
    with pytest.raises(ClusterMapError, match=r"bad.toml: not a valid TOML cluster map"):
        load_map(bad)


def test_balanced_homes_give_every_group_its_share_and_move_few_when_one_worker_comes() -> None:
    groups = [(f"g{i}", group_seed(f"g{i}"), 1.0) for i in range(10)]
    workers = [f"worker-{n}" for n in range(50)]
    homes = balanced(workers, groups)
    assert set(homes) == set(workers)
    assert sorted(Counter(homes.values()).values()) == [5] * 10  # plain rendezvous is uneven
    assert max(Counter(ranked_home(w, groups) for w in workers).values()) > 5
    assert balanced(list(reversed(workers)), groups) == homes  # the same answer everywhere
    more = balanced([*workers, "worker-50"], groups)
    assert sum(1 for w in workers if more[w] != homes[w]) <= len(workers) // 5


def ranked_home(worker: str, groups: list[tuple[str, int, float]]) -> str:
    return ranked(zlib.crc32(worker.encode()), groups)[0]
