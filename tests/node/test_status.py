"""The status document: figures from one source, typed peer rows, the same bytes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import msgpack

from forum.node.api.status import NodeStatus, PeerStatus
from forum.node.core.reports import ForumStats
from forum.node.core.space import Pattern
from forum.node.space.forum import Forum
from forum.node.storage.strand import Strand, StrandConfig

PEER = PeerStatus(
    url="http://b:7070",
    advertised="http://b.example:7070",
    origin="b-1a2b",
    seed=True,
    state="alive",
    last_contact=1700000000.5,
    last_contact_age=0.25,
    failures=0,
    last_error=None,
    behind=3,
    queued=2,
)
STATUS = NodeStatus(
    node_id="a", origin="a-9f", advertise="http://a:7070", version="0.1.0", uptime_seconds=12.5,
    entries=10, live=4, strand_bytes=2048, segments=1, waiting_takers=1, reserved=2, long_polls=0,
    writes=6, takes=4, double_takes=0, tails_cut=0, fsync="interval", peers=(PEER,),
)  # fmt: skip
#: What the node answered before peer rows were typed (dicts built by replication).
JSON_BEFORE = (
    '{"node_id": "a", "origin": "a-9f", "advertise": "http://a:7070", "version": "0.1.0", '
    '"uptime_seconds": 12.5, "entries": 10, "live": 4, "strand_bytes": 2048, "segments": 1, '
    '"waiting_takers": 1, "reserved": 2, "long_polls": 0, "writes": 6, "takes": 4, '
    '"double_takes": 0, "tails_cut": 0, "fsync": "interval", "peers": [{"url": "http://b:7070", '
    '"advertised": "http://b.example:7070", "origin": "b-1a2b", "seed": true, "state": "alive", '
    '"last_contact": 1700000000.5, "last_contact_age": 0.25, "failures": 0, "last_error": null, '
    '"behind": 3, "queued": 2}]}'
)


#: The same, from a node with compaction, streams, scheduling, clock offsets,
#: lags, clock refusals and double takes per prefix: five figures more in
#: each peer row, and eighteen in the document, at their ends.
JSON_NOW = JSON_BEFORE.removesuffix("}]}") + (
    ', "holds_back": 0, "forgotten": false, "clock_offset": null, "lag_seconds": null, '
    '"clock_refused": false}], '
    '"compactions": 0, '
    '"bytes_reclaimed": 0, '
    '"entries_dropped": 0, "vector": {}, "horizon": {}, "streams_open": 0, '
    '"streams_in_flight": 0, "streams_peak_in_flight": 0, "streams_max_in_flight": 0, '
    '"streams_requests": 0, "streams_bad_frames": 0, "delayed": 0, "expired": 0, '
    '"paused": [], "limits": {}, "not_ready": null, "degraded": [], "repair": null, '
    '"double_takes_by_prefix": {}, "group": null, "map_epoch": null, "misplaced_writes": 0}'
)


def test_the_status_document_is_the_same_bytes_as_before_but_the_new_figures() -> None:
    document = STATUS.to_document()
    assert json.dumps(document) == JSON_NOW
    assert msgpack.packb(document) == msgpack.packb(json.loads(JSON_NOW))


def test_a_status_document_parses_back_into_typed_peer_rows() -> None:
    # From a node older than compaction: its figures are 0, its vector empty.
    document = json.loads(JSON_BEFORE)
    document["from_a_newer_node"] = 1
    document["peers"][0]["also_newer"] = "x"
    parsed = NodeStatus.from_document(document)
    assert parsed == STATUS
    assert isinstance(parsed.peers[0], PeerStatus) and parsed.peers[0].state == "alive"


async def test_every_forum_figure_is_in_the_status_as_the_forum_counts_it(tmp_path: Path) -> None:
    cfg = StrandConfig().with_storage(tmp_path).with_node_name("n").with_fsync("never")
    async with Forum(await Strand.open(cfg)) as forum:
        await forum.write_many([b"job-1", b"job-2", b"job-3"])
        await forum.take(Pattern(b"job-"))
        await forum.reserve(Pattern(b"job-"), lease=30)
        stats = forum.stats()
        status = NodeStatus.of(
            stats,
            node_id="n",
            advertise="http://n:7070",
            version="0",
            uptime_seconds=1.0,
            long_polls=0,
            fsync="never",
            peers=(),
        )
    figures = {f.name: getattr(stats, f.name) for f in dataclasses.fields(ForumStats)}
    assert {name: getattr(status, name) for name in figures} == figures
    assert (status.writes, status.takes, status.live, status.reserved) == (3, 1, 1, 1)
