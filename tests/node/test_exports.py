"""The node package's public surface: exactly these names."""

from __future__ import annotations

import node

EXPORTED = [
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


def test_all_is_exactly_the_public_names_sorted() -> None:
    assert node.__all__ == EXPORTED


def test_every_public_class_is_in_all() -> None:
    # Submodules (lowercase) become attributes when imported; classes are all exported.
    assert {name for name in dir(node) if name[0].isupper()} == set(EXPORTED)
