"""The cluster map: which replica groups there are, their members, weights and states.

A **replica group** is what a Forum cluster of R nodes was before groups: its
members replicate every entry among themselves (push, anti-entropy, turns,
reservations, compaction by causal stability over the group's members only).
Nothing is gossiped between groups. The map says which groups there are::

    epoch = 3
    [[groups]]
    id = "g1"
    members = ["http://10.0.0.1:7000", "http://10.0.0.2:7000", "http://10.0.0.3:7000"]
    [[groups]]
    id = "g2"
    weight = 2.0                      # twice g1's share of the slots
    state = "draining"                # no new writes; still served until empty
    members = ["http://10.0.1.1:7000", "http://10.0.1.2:7000", "http://10.0.1.3:7000"]

It lives in the operator's config (a TOML or JSON file, a Kubernetes
ConfigMap); every node given one serves it (``GET /v1/map``), signed
with the cluster secret, and names its epoch in every HTTP answer
(``Forum-Map-Epoch``), so a client holding an older map fetches the newer.

**Correctness never depends on everyone agreeing on the map.** Any group
takes any write; a stale map only puts a job in a group that does not own
its slot, where it is *misplaced*, not lost: it is durable there and taken
there, and its copies meet the same Lens keys (placement-independent), as a
double take's do. So the map needs no consensus on the data path, and a
later version may keep the desired map in etcd or the Kubernetes API
(written by one leased controller) without changing this document.

States: ``active`` groups own slots and take new writes; ``draining`` ones
take none but are still served (their backlog drains in place); ``retired``
ones are neither (the operator retires a group once it is empty).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from forum.node.cluster.slots import SLOTS, bounded, group_seed, ranked
from forum.node.core.errors import ClusterMapError
from forum.node.core.urls import node_url

GroupState = Literal["active", "draining", "retired"]
_STATES: tuple[str, ...] = get_args(GroupState)
#: A group id: short, and safe in a URL, a Redis key and a metric label.
_GROUP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True, slots=True)
class Group:
    """One replica group: its id, its members' base URLs, its weight (its
    share of the slots is its share of the active weights) and its state."""

    id: str
    members: tuple[str, ...]
    weight: float = 1.0
    state: GroupState = "active"

    def to_document(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "members": list(self.members),
            "weight": self.weight,
            "state": self.state,
        }


@dataclass(frozen=True)
class ClusterMap:
    """A version of the map (see the module docstring). Build one with
    :meth:`from_document` or :func:`load_map`: both check it whole."""

    epoch: int
    groups: tuple[Group, ...]
    #: Per slot, its owner's id: made on the first look (16384 x G draws:
    #: 40 ms at 3 groups, about a second at 100, once per map).
    _owners: list[str] = field(init=False, repr=False, compare=False)
    _active: tuple[Group, ...] = field(init=False, repr=False, compare=False)
    _seeds: tuple[tuple[str, int, float], ...] = field(init=False, repr=False, compare=False)
    _by_id: dict[str, Group] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        active = tuple(g for g in self.groups if g.state == "active")
        object.__setattr__(self, "_active", active)
        object.__setattr__(self, "_by_id", {g.id: g for g in active})
        object.__setattr__(
            self, "_seeds", tuple((g.id, group_seed(g.id), g.weight) for g in active)
        )
        object.__setattr__(self, "_owners", [])

    # -- reading it ------------------------------------------------------------

    def group(self, group_id: str) -> Group:
        """The group with ``group_id``; ``ClusterMapError`` if there is none."""
        for group in self.groups:
            if group.id == group_id:
                return group
        known = ", ".join(g.id for g in self.groups)
        raise ClusterMapError(
            f"the cluster map (epoch {self.epoch}) has no group {group_id!r} (it has {known})"
        )

    def group_of(self, url: str) -> Group | None:
        """The group ``url`` is a member of, if any."""
        url = url.rstrip("/")
        for group in self.groups:
            if url in group.members:
                return group
        return None

    @property
    def active(self) -> tuple[Group, ...]:
        """The groups that own slots and take new writes."""
        return self._active

    @property
    def served(self) -> tuple[Group, ...]:
        """The groups takes look in: active and draining (not retired)."""
        return tuple(g for g in self.groups if g.state != "retired")

    def owner(self, slot: int) -> Group:
        """The active group that owns ``slot`` (rendezvous with bounded loads:
        forum.node.cluster.slots)."""
        if not self._owners:
            self._owners.extend(bounded(range(SLOTS), self._seeds))
        return self._by_id[self._owners[slot]]

    def order(self, slot: int) -> list[Group]:
        """The active groups for ``slot``: its owner, then the rest in the
        slot's rendezvous order, where a write falls through to when no
        member of the owner answers."""
        owner = self.owner(slot)
        return [owner] + [self._by_id[g] for g in ranked(slot, self._seeds) if g != owner.id]

    # -- as a document ---------------------------------------------------------

    def to_document(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "slots": SLOTS,
            "groups": [g.to_document() for g in self.groups],
        }

    def canonical(self) -> bytes:
        """The bytes the signature covers: the document as sorted, compact JSON."""
        return json.dumps(self.to_document(), sort_keys=True, separators=(",", ":")).encode()

    def signature(self, secret: str) -> str:
        """HMAC-SHA256 of :meth:`canonical` under the cluster secret, in hex."""
        return hmac.new(secret.encode(), self.canonical(), hashlib.sha256).hexdigest()

    @classmethod
    def from_document(cls, document: Any, where: str = "cluster map") -> ClusterMap:
        """The map ``document`` describes; ``ClusterMapError`` (one line,
        starting with ``where``) naming what is wrong with it."""
        if not isinstance(document, Mapping):
            raise ClusterMapError(f"{where}: must be a table with epoch and groups")
        unknown = set(document) - {"epoch", "slots", "groups"}
        if unknown:
            raise ClusterMapError(
                f"{where}: unknown key {sorted(unknown)[0]!r} (a map has epoch, slots, groups)"
            )
        epoch = document.get("epoch")
        if type(epoch) is not int or epoch < 0:
            raise ClusterMapError(f"{where}: epoch must be a whole number >= 0, not {epoch!r}")
        slots = document.get("slots", SLOTS)
        if slots != SLOTS:
            raise ClusterMapError(f"{where}: slots is fixed at {SLOTS}, not {slots!r}")
        listed = document.get("groups")
        if not isinstance(listed, Sequence) or isinstance(listed, str | bytes) or not listed:
            raise ClusterMapError(f"{where}: groups must be a non-empty list of groups")
        groups = tuple(_group(item, f"{where}: groups[{n}]") for n, item in enumerate(listed))
        _check_unique(groups, where)
        if not any(g.state == "active" for g in groups):
            raise ClusterMapError(f"{where}: no group is active: writes would have nowhere to go")
        return cls(epoch, groups)


def _group(item: Any, where: str) -> Group:
    if not isinstance(item, Mapping):
        raise ClusterMapError(f"{where} must be a table with id and members")
    unknown = set(item) - {"id", "members", "weight", "state"}
    if unknown:
        raise ClusterMapError(
            f"{where}: unknown key {sorted(unknown)[0]!r} (a group has id, members, weight, state)"
        )
    group_id = item.get("id")
    if not isinstance(group_id, str) or not _GROUP_ID.fullmatch(group_id):
        raise ClusterMapError(
            f"{where}.id must be 1-64 letters, digits, '_', '.' or '-' (not first),"
            f" not {group_id!r}"
        )
    weight = item.get("weight", 1.0)
    if type(weight) not in (int, float) or not math.isfinite(weight) or weight <= 0:
        raise ClusterMapError(f"{where}.weight must be a positive number, not {weight!r}")
    state = item.get("state", "active")
    if state not in _STATES:
        raise ClusterMapError(f"{where}.state must be one of {', '.join(_STATES)}, not {state!r}")
    members = item.get("members", ())
    if not isinstance(members, Sequence) or isinstance(members, str | bytes):
        raise ClusterMapError(f"{where}.members must be a list of node URLs")
    if not members and state != "retired":
        raise ClusterMapError(f"{where}.members is empty: an {state} group needs at least one node")
    urls = []
    for url in members:
        try:
            urls.append(node_url(url) if isinstance(url, str) else node_url(repr(url)))
        except ValueError as exc:
            raise ClusterMapError(f"{where}.members: {exc}") from None
    return Group(group_id, tuple(urls), float(weight), state)


def _check_unique(groups: tuple[Group, ...], where: str) -> None:
    ids: set[str] = set()
    urls: dict[str, str] = {}
    for group in groups:
        if group.id in ids:
            raise ClusterMapError(f"{where}: group id {group.id!r} is listed twice")
        ids.add(group.id)
        for url in group.members:
            if url in urls:
                raise ClusterMapError(
                    f"{where}: {url} is a member of both {urls[url]!r} and {group.id!r}"
                    " (a node is in one group)"
                )
            urls[url] = group.id


def load_map(path: str | Path) -> ClusterMap:
    """The map in the TOML (``.toml``) or JSON file at ``path``;
    ``ClusterMapError`` (one line, naming the file) for a missing, unreadable
    or wrong one."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterMapError(f"{path}: cannot read the cluster map ({exc.strerror})") from None
    try:
        document = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except ValueError as exc:  # both decoders' errors are ValueErrors
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise ClusterMapError(f"{path}: not a valid {kind} cluster map ({exc})") from None
    return ClusterMap.from_document(document, str(path))


def local_map(urls: Sequence[str]) -> ClusterMap:
    """The map of one group of ``urls``: a cluster without a map is one group
    (``default``), so a client given plain node URLs routes as before."""
    return ClusterMap(0, (Group("default", tuple(node_url(u) for u in urls)),))
