"""The turns of a remote tuple among the live members (forum.replication.ranking)."""

from __future__ import annotations

import random

from forum.node.core.entries import EntryId
from forum.replication.membership import Membership, PeerState
from forum.replication.messages import Member
from forum.replication.ranking import MemberRanking, rank_among, turn_order
from tests.replication.test_membership import Clock, Events

MEMBERS = frozenset("node-" + c for c in "abcdefg")
SEED = 13


def ids(n: int = 200) -> list[EntryId]:
    """Entry ids of random writers among MEMBERS (seeded: print the seed on failure)."""
    rng = random.Random(SEED)
    return [EntryId(rng.choice(sorted(MEMBERS)), rng.randint(1, 10**9)) for _ in range(n)]


def ranks(entry_id: EntryId, alive: frozenset[str]) -> dict[str, int]:
    """Each member's own rank, as it computes it from its peers alive (not itself)."""
    return {me: rank_among(entry_id, me, alive - {me}) for me in alive}


def test_every_member_computes_the_same_order_ranks_0_to_n_less_1_writer_first() -> None:
    for entry_id in ids():
        mine = ranks(entry_id, MEMBERS)
        order = turn_order(entry_id, MEMBERS)
        assert sorted(mine, key=mine.__getitem__) == order, SEED
        assert sorted(mine.values()) == list(range(len(MEMBERS))), SEED
        assert order[0] == entry_id.origin and mine[entry_id.origin] == 0, SEED


def test_the_first_turn_after_the_writer_moves_round_the_members() -> None:
    firsts = {turn_order(entry_id, MEMBERS)[1] for entry_id in ids()}
    assert firsts == MEMBERS, SEED  # no member is always second (or never)


def test_a_dead_member_is_skipped_so_nobody_waits_on_it() -> None:
    for entry_id in ids():
        before = ranks(entry_id, MEMBERS)
        dead = turn_order(entry_id, MEMBERS)[1]  # the first non-writer
        after = ranks(entry_id, MEMBERS - {dead})
        assert sorted(after.values()) == list(range(len(MEMBERS) - 1)), SEED
        for member, rank in after.items():  # everyone after it moved up one
            assert rank == before[member] - (before[member] > before[dead]), SEED


def test_with_the_writer_down_the_first_live_member_ranks_0() -> None:
    for entry_id in ids():
        alive = MEMBERS - {entry_id.origin}
        after = ranks(entry_id, alive)
        assert sorted(after.values()) == list(range(len(alive))), SEED
        assert after[turn_order(entry_id, alive)[0]] == 0, SEED


def test_the_rank_follows_the_membership_s_view_of_who_is_alive() -> None:
    """t0: b and c answer (alive); t1: a call to b fails (suspect): b's turn
    is gone at once, and the change is reported so waiting tuples move up."""
    membership = Membership(
        me=Member("me", "http://me:1"),
        seeds=["http://b:1", "http://c:1"],
        dead_after=5,
        forget_after=60,
        clock=Clock(),
    )
    events = Events()
    membership.start(events)
    ranking = MemberRanking("me", membership.alive)
    # A tuple written by c in whose turns b comes before me.
    entry_id = next(
        EntryId("c", seq)
        for seq in range(1, 1000)
        if turn_order(EntryId("c", seq), frozenset({"b", "c", "me"})) == ["c", "b", "me"]
    )
    assert ranking(entry_id) == 0  # nobody alive yet: no turn to wait for
    membership.contacted("http://b:1", Member("b", "http://b:1"))
    membership.contacted("http://c:1", Member("c", "http://c:1"))
    assert membership.alive() == {"b", "c"}
    assert ranking(entry_id) == 2

    membership.failed("http://b:1", ConnectionError("refused"))
    assert membership.get("http://b:1").state is PeerState.SUSPECT  # type: ignore[union-attr]
    assert ("down", "http://b:1") in events.log
    assert ranking(entry_id) == 1
    membership.failed("http://c:1", ConnectionError("refused"))
    assert ranking(entry_id) == 0  # the writer is down too: our turn at once

    membership.contacted("http://b:1", Member("b", "http://b:1"))
    assert ranking(entry_id) == 1


def test_a_rank_counted_is_the_place_in_the_order_sorted() -> None:
    """rank_among (counted, the id hashed once) agrees with turn_order (sorted)."""
    for entry_id in ids():
        for me in MEMBERS:
            assert turn_order(entry_id, MEMBERS).index(me) == rank_among(
                entry_id, me, MEMBERS - {me}
            ), SEED
