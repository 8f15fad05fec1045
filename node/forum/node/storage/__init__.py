"""The Strand, the node's append-only log: segment files, the manifest that
says what the directory must hold, damage found on replay, and compaction's
rules."""
