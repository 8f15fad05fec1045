"""The peer table: seeds, learned peers, never ourselves, liveness."""

from __future__ import annotations

from forum.replication.errors import PeerUnavailable
from forum.replication.membership import Membership, Peer, PeerState
from forum.replication.messages import Member

ME = Member("me-1", "http://me:1")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Events:
    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def peer_added(self, peer: Peer) -> None:
        self.log.append(("added", peer.url))

    def peer_removed(self, peer: Peer) -> None:
        self.log.append(("removed", peer.url))

    def peer_returned(self, peer: Peer) -> None:
        self.log.append(("returned", peer.url))

    def peer_heard(self, peer: Peer) -> None:
        self.log.append(("heard", peer.url))

    def peer_down(self, peer: Peer) -> None:
        self.log.append(("down", peer.url))


def table(*seeds: str, clock: Clock | None = None) -> tuple[Membership, Events]:
    membership = Membership(
        me=ME, seeds=seeds, dead_after=5, forget_after=60, clock=clock or Clock()
    )
    events = Events()
    membership.start(events)
    return membership, events


def urls(membership: Membership) -> set[str]:
    return {p.url for p in membership.peers()}


def test_seeds_are_peers_but_never_ourselves() -> None:
    membership, events = table("http://a:1/", "http://me:1", "http://b:1")
    assert urls(membership) == {"http://a:1", "http://b:1"}
    assert events.log == [("added", "http://a:1"), ("added", "http://b:1")]


def test_a_seed_that_answers_with_our_origin_is_dropped_for_good() -> None:
    membership, _ = table("http://loop:1")
    assert membership.contacted("http://loop:1", Member("me-1", "http://me:1")) is None
    assert urls(membership) == set()
    membership.learn([Member("other-9", "http://loop:1")])
    assert urls(membership) == set()


def test_members_are_learned_once_and_by_advertised_url() -> None:
    membership, _ = table("http://a:1")
    membership.contacted("http://a:1", Member("a-1", "http://a:1"))
    membership.learn(
        [
            ME,
            Member("a-1", "http://a-other-address:1"),  # a known origin
            Member("b-1", "http://b:1"),
            Member("c-1", None),  # advertises nothing: cannot be dialled
        ]
    )
    assert urls(membership) == {"http://a:1", "http://b:1"}
    assert membership.get("http://b:1") is not None
    assert membership.get("http://b:1").seed is False  # type: ignore[union-attr]


def test_a_seed_wins_over_a_learned_url_for_the_same_node() -> None:
    membership, events = table("http://proxy-to-b:1")
    membership.learn([Member("b-1", "http://b:1")])
    assert urls(membership) == {"http://proxy-to-b:1", "http://b:1"}
    membership.contacted("http://proxy-to-b:1", Member("b-1", "http://b:1"))
    assert urls(membership) == {"http://proxy-to-b:1"}
    assert ("removed", "http://b:1") in events.log


def test_a_wiped_node_keeps_its_url_under_a_new_origin() -> None:
    membership, _ = table("http://a:1")
    membership.contacted("http://a:1", Member("a-old", "http://a:1"))
    peer = membership.contacted("http://a:1", Member("a-new", "http://a:1"))
    assert peer is not None and peer.origin == "a-new"
    assert urls(membership) == {"http://a:1"}


def test_states_follow_calls() -> None:
    clock = Clock()
    membership, events = table("http://a:1", clock=clock)
    peer = membership.get("http://a:1")
    assert peer is not None and peer.state is PeerState.SUSPECT  # never reached yet
    membership.contacted("http://a:1", Member("a-1", "http://a:1"))
    assert peer.state is PeerState.ALIVE
    error = PeerUnavailable("http://a:1", "refused")
    membership.failed("http://a:1", error)
    assert peer.state is PeerState.SUSPECT
    clock.now += 4
    membership.failed("http://a:1", error)
    assert peer.state is PeerState.SUSPECT
    clock.now += 2
    membership.failed("http://a:1", error)
    assert peer.state is PeerState.DEAD
    membership.heard_from(Member("a-1", "http://a:1"))
    assert events.log[-1] == ("heard", "http://a:1")
    membership.contacted("http://a:1", Member("a-1", "http://a:1"))
    assert peer.state is PeerState.ALIVE
    assert events.log.count(("returned", "http://a:1")) == 2
    assert peer.failures == 0


def test_a_learned_peer_dead_long_enough_is_forgotten_a_seed_never() -> None:
    clock = Clock()
    membership, _ = table("http://seed:1", clock=clock)
    membership.learn([Member("l-1", "http://learned:1")])
    error = PeerUnavailable("x", "refused")
    for _ in range(3):
        for url in ("http://seed:1", "http://learned:1"):
            membership.failed(url, error)
        clock.now += 40
    assert urls(membership) == {"http://seed:1"}


def test_a_caller_we_did_not_know_is_learned_from_what_it_advertises() -> None:
    membership, _ = table()
    membership.heard_from(Member("n-1", "http://new:1"))
    assert urls(membership) == {"http://new:1"}
    assert [m.origin for m in membership.members()] == ["me-1"]  # not reached yet


def test_members_are_passed_on_by_the_url_they_advertise() -> None:
    membership, _ = table("http://proxy-to-b:1")
    membership.contacted("http://proxy-to-b:1", Member("b-1", "http://b:1"))
    assert Member("b-1", "http://b:1") in membership.members()
    assert membership.get("http://proxy-to-b:1") is not None  # still dialled via the proxy
