"""The replica groups of a scaled-out cluster, as the dashboard shows them.

A node started with a cluster map (docs/scaling.md) is a member of one
replica group; its replication reaches only that group's members, so what
the dashboard knows of the other groups it asks them over HTTP, with this
node's client token (the nodes of a cluster share one):

* the Overview's groups: each member's status, sampled with the peers'
  (:class:`~forum.dashboard.sampler.Sampler`, whose rings this module reads:
  :func:`sampled_elsewhere` names the members to ask), so a member is
  alive when its last look answered and unreachable when it failed;
* the Prefixes panel's counts: each other group's ``GET /v1/prefixes``,
  asked of its members in turn when the page is served
  (:meth:`Groups.prefixes`). A group none of whose members answers within
  :data:`ASK_TIMEOUT` is named unreachable on the page; it never fails it.

On a node without a map there is no :class:`Groups` and nothing here is asked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import aiohttp
import msgspec

from forum.dashboard.sampler import NodeHistory
from forum.node.api.model import PrefixBody, Prefixes
from forum.node.cluster.map import Group
from forum.node.http.cluster import MapHolder

#: Seconds the Prefixes panel waits for each other group (all asked at once).
ASK_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True)
class MemberRow:
    """One member of a group: its URL, its name once it answered, and
    ``alive`` (its last look answered), ``unreachable`` (it failed: ``error``
    says why) or ``not sampled yet``."""

    url: str
    name: str
    state: str
    error: str | None
    live: int | None
    reserved: int | None


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One group of the map on the Overview."""

    id: str
    state: str
    weight: float
    here: bool
    members: tuple[MemberRow, ...]

    @property
    def unreachable(self) -> bool:
        """No member of a served group answers (a retired group is not asked)."""
        return self.state != "retired" and not any(m.state == "alive" for m in self.members)

    @property
    def live(self) -> int | None:
        """The group's live tuples: every member holds them all, so the most
        any alive member counts (one behind counts fewer); ``None``: none answered."""
        return max((m.live for m in self.members if m.live is not None), default=None)

    @property
    def reserved(self) -> int:
        """Tuples reserved in the group: reservations are per member, so summed."""
        return sum(m.reserved or 0 for m in self.members)


def sampled_elsewhere(holder: MapHolder | None) -> list[str]:
    """The members of the map's other served groups, for the sampler to ask."""
    if holder is None:
        return []
    return [url for g in holder.map.served if g.id != holder.group.id for url in g.members]


def group_rows(holder: MapHolder, histories: Mapping[str, NodeHistory]) -> list[GroupRow]:
    """The Overview's groups, in map order, each member as its samples say."""
    return [
        GroupRow(
            g.id,
            g.state,
            g.weight,
            g.id == holder.group.id,
            tuple(_member(url, histories.get(url)) for url in g.members),
        )
        for g in holder.map.groups
    ]


def _member(url: str, history: NodeHistory | None) -> MemberRow:
    status = None if history is None else history.latest
    if history is None or (status is None and history.error is None):
        return MemberRow(url, url, "not sampled yet", None, None, None)
    name = url if status is None else status.node_id
    if history.error is not None or status is None:
        return MemberRow(url, name, "unreachable", history.error, None, None)
    return MemberRow(url, name, "alive", None, status.live, status.reserved)


class Groups:
    """What the Prefixes panel asks the other groups (see the module docstring)."""

    def __init__(self, holder: MapHolder, token: str | None) -> None:
        self.holder = holder
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._session: aiohttp.ClientSession | None = None

    @property
    def elsewhere(self) -> list[Group]:
        """The served groups other than this node's, as the map holds them now."""
        return [g for g in self.holder.map.served if g.id != self.holder.group.id]

    async def prefixes(self, separator: str) -> tuple[list[list[PrefixBody]], list[str]]:
        """Each other group's rows of ``GET /v1/prefixes?separator=``, and the
        ids of the groups none of whose members answered."""
        groups = self.elsewhere
        answers = await asyncio.gather(*(self._group_prefixes(g, separator) for g in groups))
        found = [rows for rows in answers if rows is not None]
        missing = [g.id for g, rows in zip(groups, answers, strict=True) if rows is None]
        return found, missing

    async def _group_prefixes(self, group: Group, separator: str) -> list[PrefixBody] | None:
        """The first answer of the group's members, asked in turn within
        :data:`ASK_TIMEOUT`; ``None`` when none gave one."""
        session = self._open()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ASK_TIMEOUT):
                for url in group.members:
                    try:
                        async with session.get(
                            f"{url}/v1/prefixes",
                            params={"separator": separator},
                            headers=self._headers,
                        ) as answer:
                            if answer.status == 200:
                                body = await answer.read()
                                return msgspec.json.decode(body, type=Prefixes).prefixes
                    except (aiohttp.ClientError, msgspec.DecodeError):
                        continue
        return None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Its connections, closed when the block ends (with the node)."""
        try:
            yield
        finally:
            session, self._session = self._session, None
            if session is not None:
                await session.close()
