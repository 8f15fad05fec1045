"""Example job handlers whose effects are safe to repeat; see docs/coordination.md.

``fenced_redis``     result stored with its fencing token; Redis refuses a lower token (Lua)
``fenced_sqlite``    the same with SQLite, as a conditional upsert
``idempotency_key``  a side effect deduplicated by the job's key (its entry id)

Each module offers ``open_handler()``: an async context manager yielding the
handler, for ``forum worker --handler examples.handlers.<module>:open_handler``.
"""
