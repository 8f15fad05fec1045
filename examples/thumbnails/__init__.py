"""Image thumbnails as tasks: the task layer's example app (docs/tasks.md).

::

    app.py       the app: a ``thumbnail`` task whose effect, a row in SQLite,
                 happens once per job key and never from a stale holder
    produce.py   a producer: enqueues thumbnails and waits for their results

Run it (a node, a Redis, a worker, the producer)::

    forum serve &
    redis-server --appendonly yes --appendfsync always --dir "$(mktemp -d)" &
    forum worker --app examples.thumbnails.app:app &
    python -m examples.thumbnails.produce --images 20
"""
