"""Schemathesis against real ``forum serve`` processes, from the document they serve.

Each node is fuzzed with data that fits its ``/v1/openapi.json`` (positive)
and data that does not (negative), with and without a token, and every
answer must pass the named checks: no 5xx, only documented statuses, content
types and bodies, and invalid data refused. ``max_wait`` is cut to 0.05 s so
that long polls answer at once; the number of examples is bounded so that
the whole runs in seconds.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import pytest_asyncio
import requests
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually

TOKEN = "fuzz-token"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
#: Routes whose answer never ends (``requests`` reads a body to its end):
#: tests/service/test_watch.py holds the watch to its description instead.
ENDLESS = frozenset({"/v1/watch"})
EXAMPLES = int(os.environ.get("FORUM_FUZZ_EXAMPLES", "25"))
#: Fewer for invalid data: the node refuses it at its validation, before the
#: space, so a few cases per operation show the refusal (and the seed differs
#: each run); at 25 each negative run took ~23 s of the suite.
NEGATIVE_EXAMPLES = int(os.environ.get("FORUM_FUZZ_NEGATIVE_EXAMPLES", "10"))
SEED = int(os.environ.get("FORUM_FUZZ_SEED", random.randrange(2**32)))

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@schemathesis.serializer("application/msgpack")
def _msgpack(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    return bytes(msgpack.packb(_packable(value), use_bin_type=True))


def _packable(value: Any) -> Any:
    """``value`` with the integers msgpack cannot hold (past 64 bits) as text."""
    if isinstance(value, dict):
        return {k: _packable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_packable(v) for v in value]
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return str(value)
    return value


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def nodes(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ForumNodes]:
    made = ForumNodes(Path(tmp_path_factory.mktemp("schemathesis")))
    try:
        common = ("--max-wait", "0.05", "--fsync", "never")
        await made.start("open", *common)
        await made.start("guarded", *common, "--cluster-secret", "fuzz-peers", token=TOKEN)
        yield made
    finally:
        await made.aclose()


def fuzz(node: NodeProcess, mode: GenerationMode) -> Counter[tuple[str, str, int]]:
    """Run schemathesis on each operation of ``node`` (blocking: it uses
    ``requests``); how many answers each operation got, by status."""
    headers = {"Authorization": f"Bearer {node.token}"} if node.token else {}
    # The token through schemathesis's own auth, so that a case it generates
    # without (to check the node refuses it) is sent without.
    auth = {"auth": {"openapi": {"bearer": {"bearer": node.token}}}} if node.token else {}
    schema = schemathesis.openapi.from_url(
        f"{node.url}/v1/openapi.json", headers=headers, config=schemathesis.Config.from_dict(auth)
    )
    answers: Counter[tuple[str, str, int]] = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path in ENDLESS:
            continue

        @seed(SEED)
        @settings(
            max_examples=EXAMPLES if mode is GenerationMode.POSITIVE else NEGATIVE_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case: schemathesis.Case) -> None:
            response = case.call_and_validate(base_url=node.url, checks=CHECKS, timeout=10)
            answers[(case.method, case.path, response.status_code)] += 1

        try:
            check()
        except Unsatisfiable:
            # No data can break this operation's schema (it takes no input).
            if mode is GenerationMode.POSITIVE:
                raise
    return answers


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("name", ["open", "guarded"])
async def test_the_node_conforms_to_its_own_openapi(
    nodes: ForumNodes, name: str, mode: GenerationMode
) -> None:
    examples = EXAMPLES if mode is GenerationMode.POSITIVE else NEGATIVE_EXAMPLES
    print(f"schemathesis seed {SEED} (FORUM_FUZZ_SEED), {examples} examples per operation")
    node = nodes.nodes[name]
    answers = await asyncio.to_thread(fuzz, node, mode)
    print("\n".join(f"{n:4} {method} {path} -> {status}" for (method, path, status), n in
                    sorted(answers.items())))  # fmt: skip
    # Every operation was reached (negative data only exists for those with
    # parameters or a body), and the node is still up.
    reached = {(method, path) for method, path, _ in answers}
    assert len(reached) >= (19 if mode is GenerationMode.POSITIVE else 13)
    assert node.running


async def test_the_watch_conforms_to_its_own_openapi(nodes: ForumNodes) -> None:
    """``GET /v1/watch``, which the fuzzing above leaves out (it never ends), as
    Schemathesis 4 validates an event stream: its body read as a list of
    events, each ``{event, data, id}`` checked against the document. The
    node's shutdown ends the stream; every event it sent (``ready``, the
    writes and takes made meanwhile) must fit (the document said a string,
    which no event is)."""
    node = await nodes.start("watched", "--fsync", "never")
    schema = schemathesis.openapi.from_url(f"{node.url}/v1/openapi.json")
    case = schema["/v1/watch"]["GET"].Case(query={"prefix": "w-"})
    connected = threading.Event()

    def watch() -> requests.Response:
        response = requests.get(f"{node.url}/v1/watch?prefix=w-", stream=True, timeout=30)
        connected.set()
        assert response.content  # read to its end: the node's shutdown
        return response

    watching = asyncio.create_task(asyncio.to_thread(watch))
    await eventually(connected.is_set, what="the watch is open")
    async with ForumClient(node.url) as client:
        for i in range(3):
            await client.write(f"w-{i}".encode())
            assert await client.take(Pattern(b"w-")) is not None
    assert await node.end(signal.SIGTERM) == 0
    response = await watching
    case.validate_response(response, checks=CHECKS)
    for kind in (b"ready", b"write", b"take"):
        assert b"event: " + kind in response.content
