"""One Forum node: its log, its live tuple space, its HTTP API and the client
of that API, one subpackage per concept (docs/layout.md has the map).

Which subpackage may import which (``tests/test_layers.py`` checks it)::

    core     entries, errors, codec, write options, the TupleSpace protocol    none
    storage  the Strand: segments, the manifest, damage, compaction's rules     core
    space    the Forum over a Strand: index, schedule, dedup, watch             core, storage
    config   the node's settings, flags, env and TOML                          core, storage, space
    api      the wire contract both ends share: bodies, statuses, documents    core
    client   ForumClient over the stream and HTTP, the sync client             core, api
    http     the aiohttp server                                                all but client
    serve    ``forum serve``: one node's process (a module)                    all but client

This package imports nothing: a program that imports only the client loads
no server module and not ``aiohttp.web``.
"""
