"""What every layer of the node shares: entries and ids, the errors, the
binary codec, write options and the TupleSpace protocol. Imports nothing else
of Forum."""
