"""Fixtures shared by every test package: real servers, started on free ports."""

pytest_plugins = [
    "tests.fixtures.ports",  # first: the others import it
    "tests.fixtures.nodes",
    "tests.fixtures.redis_server",
    "tests.fixtures.tmpfs",
    "tests.fixtures.toxiproxy",
]
