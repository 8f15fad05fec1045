"""Forum's node: the Strand log, the live index and the tuple-space API."""

from node.client import ForumClient
from node.config import NodeConfig
from node.entries import Entry, EntryId, Reserved, Take, Tuple, Write
from node.errors import ForumError, SerializationError, StrandError
from node.forum import Forum, ForumStats, ListPage
from node.space import Pattern, ReservingSpace, TupleSpace
from node.strand import Strand, StrandConfig
from node.sync_client import SyncForumClient

__all__ = [
    "Entry",
    "EntryId",
    "Forum",
    "ForumClient",
    "ForumError",
    "ForumStats",
    "ListPage",
    "NodeConfig",
    "Pattern",
    "Reserved",
    "ReservingSpace",
    "SerializationError",
    "Strand",
    "StrandConfig",
    "StrandError",
    "SyncForumClient",
    "Take",
    "Tuple",
    "TupleSpace",
    "Write",
]
