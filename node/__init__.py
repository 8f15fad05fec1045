"""Forum's node: the Strand log, the live index and the tuple-space API."""

from node.entries import Entry, EntryId, Take, Tuple, Write
from node.errors import ForumError, SerializationError, StrandError
from node.forum import Forum, ForumStats, ListPage
from node.space import Pattern, TupleSpace
from node.strand import Strand, StrandConfig

__all__ = [
    "Entry",
    "EntryId",
    "Forum",
    "ForumError",
    "ForumStats",
    "ListPage",
    "Pattern",
    "SerializationError",
    "Strand",
    "StrandConfig",
    "StrandError",
    "Take",
    "Tuple",
    "TupleSpace",
    "Write",
]
