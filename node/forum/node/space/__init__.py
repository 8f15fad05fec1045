"""The live tuple space over a Strand: the Forum with its index, schedule,
dedup, watches and compaction passes."""
