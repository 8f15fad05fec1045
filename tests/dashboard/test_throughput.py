"""The Prefixes panel's writes/s and takes/s per group (dashboard/forum/dashboard/throughput.py):
counted from the node's own watch hub only while the panel is looked at, in
a real node app and Forum; and the arithmetic of the window on events with
the times given."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from forum.dashboard import dashboard
from forum.dashboard import throughput as throughput_module
from forum.dashboard.pages import RATES
from forum.dashboard.throughput import GroupRates, Rate
from forum.node.core.entries import EntryId, Take, Write
from forum.node.core.space import Pattern
from forum.node.http.keys import FORUM, WATCH_HUB
from forum.node.space.watch import HubEvent
from tests.dashboard.test_sampler import running_app
from tests.fixtures.nodes import eventually


class _NoHub:
    """``GroupRates.count`` and ``rates`` never touch the hub."""


def events(*entries: tuple[Write | Take, bytes | None]) -> list[HubEvent]:
    return [HubEvent(n, item, match) for n, (item, match) in enumerate(entries, 1)]


def test_events_made_here_are_counted_in_their_groups_over_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(throughput_module.time, "monotonic", lambda: now[0])
    rates = GroupRates(_NoHub(), lambda: "here")  # type: ignore[arg-type]
    rates.looked(b"/")
    assert rates.rates(b"/") is None  # no figure before FIRST_FIGURE s of counting
    rates.count(
        events(
            (Write(EntryId("here", 1), b"job/1"), b"job/1"),
            (Write(EntryId("here", 2), b"job/2"), b"job/2"),
            (Take(EntryId("here", 3), EntryId("here", 1)), b"job/1"),
            (Take(EntryId("here", 4), EntryId("peer", 9)), None),  # its write unknown
            (Write(EntryId("peer", 5), b"job/3"), b"job/3"),  # a peer's: not this node's
            (Write(EntryId("here", 6), b"plain"), b"plain"),  # no separator: its own group
        ),
        now[0],
    )
    now[0] += 10.0
    found = rates.rates(b"/")
    assert found is not None
    assert found == ({b"job/": Rate(0.2, 0.1), b"plain": Rate(0.1, 0.0)}, 0.1)
    now[0] += 100.0  # past the window: nothing left of them
    rates.count([], now[0])
    assert rates.rates(b"/") == ({}, 0.0)


async def test_the_hub_is_watched_only_while_the_panel_is_looked_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(throughput_module, "LINGER", 0.5)
    monkeypatch.setattr(throughput_module, "_POLL", 0.05)
    async with running_app(tmp_path, "a", [dashboard(0.05)]) as (app, url):
        hub, forum = app[WATCH_HUB], app[FORUM]
        await forum.write(b"job/before")  # while nobody looks: the hub keeps nothing
        assert (hub.watchers, hub.held) == (0, (0, 0))
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/ui/prefixes") as answer:
                assert answer.status == 200
                assert "—" in await answer.text()  # no figure yet
            await eventually(lambda: hub.watchers == 1, what="the hub watched")
            await forum.write(b"job/1")
            assert await forum.take(Pattern(b"job/1")) is not None
            assert await forum.take(Pattern(b"job/before")) is not None
            monkeypatch.setattr(throughput_module, "FIRST_FIGURE", 0.0)
            counted = app[RATES]

            def both() -> object:
                """Both takes in job/, job/before's too (written while
                nobody looked: the Forum gives the hub the tuple it took)."""
                found = counted.rates(b"/")
                if found is None:
                    return False
                return found[0].get(b"job/", Rate(0.0, 0.0)).takes > 0 and found[1] == 0

            await eventually(both, what="the takes counted")
        # Nobody looks for LINGER s: the watch ends, and the hub keeps no payload.
        await eventually(lambda: hub.watchers == 0, what="the watch ended")
        await forum.write(b"job/2")
        assert hub.held == (0, 0)
