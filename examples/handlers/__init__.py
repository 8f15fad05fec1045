"""Example job handlers whose effects are safe to repeat; see docs/coordination.md.

``fenced_redis``     result stored beside the Lens, only under the job's live claim (Lua)
``fenced_sqlite``    result stored with its fencing token; a lower one refused (an upsert)
``idempotency_key``  a side effect deduplicated by the job's key (its entry id)

Each module offers ``open_handler()``: an async context manager yielding the
handler, for ``forum worker --handler examples.handlers.<module>:open_handler``.
"""
