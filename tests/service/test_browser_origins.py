"""A browser's request from another site's page, or by another host name,
against real ``forum serve`` processes, with the headers a browser sends
spelt out (node/forum/node/http/auth.py, ``browser_guard``; Chromium itself is
tests/dashboard/test_foreign_pages.py):

* every route family (tuples, take, reserve and the acks, the stream's
  WebSocket handshake, watch, the admin routes, reads, the dashboard) refuses
  a foreign ``Origin`` (another site, another port of the same host,
  ``null``) and a ``Sec-Fetch-Site`` of another site with 403, and nothing
  changes; the same request from the node's own origin, from an
  ``--allow-origin``, or with no ``Origin`` at all (a program) acts;
* on a node without a token, a ``Host`` that is none of the node's names is
  421 (DNS rebinding), the probes aside; loopback names, addresses, the
  advertised name and ``--allow-host`` names are let in; with a token any
  ``Host`` is;
* the token cookie is no way around it: the stream opened with the cookie
  from another port's page is refused, as a POST is.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import aiohttp
import msgpack
import pytest
import pytest_asyncio

from forum.node.client.remote import ForumClient
from forum.node.config.node import NodeConfig
from forum.node.core.space import Pattern
from forum.tasks import App, Context, JobState
from tests.deploy.artifacts import Dockerfile, Launch, compose_launches, load_compose, load_k8s
from tests.deploy.test_k8s import node_launches, worker_launch
from tests.fixtures.cli import assert_usage_error, run_main
from tests.fixtures.nodes import ForumNodes, NodeProcess

TOKEN = "s3cret"
#: An origin the open node is told to let in, and names it answers to.
PROXY = "https://forum.example.com"
ADVERTISED, ALLOWED = "forum-a.internal", "forum-api.internal"

#: The tests share the module's nodes, so they share its event loop.
on_the_nodes = pytest.mark.asyncio(loop_scope="module")


@dataclass(frozen=True)
class Nodes:
    open: NodeProcess  # no token: the default
    guarded: NodeProcess  # with a token


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def nodes(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Nodes]:
    forum_nodes = ForumNodes(Path(tmp_path_factory.mktemp("origins")))
    try:
        bare = forum_nodes.make("open")
        bare.args += [
            "--allow-origin", PROXY, "--allow-host", ALLOWED,
            "--advertise", f"http://{ADVERTISED}:{bare.port}",
        ]  # fmt: skip
        await forum_nodes.start_all()
        yield Nodes(bare, await forum_nodes.start("guarded", token=TOKEN))
    finally:
        await forum_nodes.aclose()


def another_port(node: NodeProcess) -> str:
    """A page on another port of the node's own host: "same-site" to a browser."""
    return f"http://127.0.0.1:{node.port + 1 if node.port < 65535 else node.port - 1}"


def foreign(node: NodeProcess) -> list[dict[str, str]]:
    """The ways a browser says a request comes from a page of another site."""
    return [
        {"Origin": "http://evil.example"},
        {"Origin": another_port(node)},
        {"Origin": "null"},  # a sandboxed frame, a file: page
        {"Origin": node.url.replace("http:", "https:")},
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"},
        {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"},
        # A frame of another site's page (clickjacking): a navigation, but not a top-level one.
        {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"},
    ]


@dataclass(frozen=True)
class Call:
    """One request of a route family; ``{id}`` in the path is a reserved tuple's."""

    method: str
    path: str
    body: bytes | None = None
    json: object = None
    #: Whether its effect shows in :func:`state` (a write, a take, a pause ...).
    visible: bool = True


#: One request of each family that acts, as a program would make it.
ACTING = {
    "write": Call("POST", "/v1/tuples", body=b"job/written"),
    "write many": Call("POST", "/v1/tuples/batch", json={"payloads": ["job/a", "job/b"]}),
    "take": Call("POST", "/v1/take?prefix=job/"),
    "take many": Call("POST", "/v1/take/batch?prefix=job/&limit=2"),
    "reserve": Call("POST", "/v1/reserve?prefix=job/&lease=60"),
    "reserve many": Call("POST", "/v1/reserve/batch?prefix=job/&lease=60&limit=2"),
    "ack": Call("POST", "/v1/ack?id={id}"),
    "ack many": Call("POST", "/v1/ack/batch", json={"ids": ["{id}"]}),
    "ack and reserve": Call("POST", "/v1/ack/reserve?prefix=job/&lease=60", json={"ids": ["{id}"]}),
    "release": Call("POST", "/v1/release?id={id}"),
    "extend": Call(
        "POST", "/v1/reserve/extend", json={"ids": ["{id}"], "lease": 90}, visible=False
    ),
    "pause": Call("POST", "/v1/prefixes/admin%2F/pause"),
    "compact": Call("POST", "/v1/compact", visible=False),
}  # fmt: skip
#: One request of each family that reads.
READING = (
    "/v1/count?prefix=job/",
    "/v1/tuples?prefix=job/",
    "/v1/read?prefix=job/",
    "/v1/status",
    "/v1/prefixes",
    "/v1/openapi.json",
    "/metrics",
    "/healthz",
    "/readyz",
    "/ui",
    "/ui/prefixes",
)


async def send(
    node: NodeProcess, call: Call, headers: dict[str, str], entry: str = ""
) -> tuple[int, dict[str, object]]:
    """``call`` made with ``headers`` (and ``entry`` for ``{id}``): the status and its JSON."""
    body = None if call.json is None else json.dumps(call.json).replace("{id}", entry).encode()
    sent = {**headers, **({"Content-Type": "application/json"} if body else {})}
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            call.method,
            node.url + call.path.replace("{id}", entry),
            data=call.body if body is None else body,
            headers=sent,
        ) as answer,
    ):
        document = await answer.json() if answer.content_type == "application/json" else {}
        return answer.status, document


async def stream_write(node: NodeProcess, headers: dict[str, str]) -> int:
    """Open the stream with ``headers`` and write one tuple on it: the status
    the handshake was refused with, else the write's."""
    async with aiohttp.ClientSession() as http:
        try:
            socket_ = await http.ws_connect(f"{node.url}/v1/stream", headers=headers)
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status
        async with socket_:
            await socket_.send_bytes(msgpack.packb([1, "write", {"payload": b"job/streamed"}]))
            _, status, _ = msgpack.unpackb((await socket_.receive()).data)
            return int(status)


async def state(node: NodeProcess) -> tuple[int, int, list[bytes]]:
    """What an acting request changes: tuples live, reserved, prefixes paused."""
    async with ForumClient(node.url, token=node.token, transport="http") as client:
        status = await client.status()
        return await client.count(Pattern(b"")), status.reserved, await client.paused()


async def reserved_entry(node: NodeProcess) -> str:
    """Tuples for the takes and a reservation of the test's own (its id)."""
    async with ForumClient(node.url, token=node.token, transport="http") as client:
        for n in range(4):
            await client.write(f"job/{n}".encode())
        held = await client.reserve(Pattern(b"job/"), lease=600)
        assert held is not None
        await client.resume(b"admin/")
        return str(held.id)


@on_the_nodes
@pytest.mark.parametrize("family", sorted(ACTING))
async def test_a_foreign_page_changes_nothing_and_the_nodes_own_page_acts(
    nodes: Nodes, family: str
) -> None:
    node, call = nodes.open, ACTING[family]
    entry = await reserved_entry(node)
    before = await state(node)
    for headers in foreign(node):
        status, document = await send(node, call, headers, entry)
        assert (status, document.get("error")) == (403, "forbidden"), headers
        assert "another site" in str(document["message"])
    assert await state(node) == before
    # The very same request from the node's own page, and from a program, acts.
    for headers in ({"Origin": node.url}, {}):
        entry = await reserved_entry(node)
        ready = await state(node)
        status, _ = await send(node, call, headers, entry)
        assert status in (200, 201), headers
        assert not call.visible or await state(node) != ready, headers


@on_the_nodes
@pytest.mark.parametrize("path", READING)
async def test_a_foreign_page_cannot_read_either(nodes: Nodes, path: str) -> None:
    node = nodes.open
    for headers in foreign(node):
        assert (await send(node, Call("GET", path), headers))[0] == 403, headers
    assert (await send(node, Call("GET", path), {"Origin": node.url}))[0] == 200
    assert (await send(node, Call("GET", path), {}))[0] == 200


@on_the_nodes
async def test_the_stream_refuses_a_foreign_handshake_and_writes_for_the_nodes_own(
    nodes: Nodes,
) -> None:
    node = nodes.open
    before = await state(node)
    for headers in foreign(node):
        assert await stream_write(node, headers) == 403, headers
    assert await state(node) == before
    assert await stream_write(node, {"Origin": node.url}) == 201
    assert await stream_write(node, {}) == 201  # the Python client sends no Origin
    assert (await state(node))[0] == before[0] + 2


@on_the_nodes
async def test_watch_refuses_a_foreign_page(nodes: Nodes) -> None:
    node = nodes.open
    watch = Call("GET", "/v1/watch?prefix=job/")
    for headers in foreign(node):
        assert (await send(node, watch, headers))[0] == 403, headers
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{node.url}/v1/watch?prefix=job/", headers={"Origin": node.url}) as answer,
    ):
        assert answer.status == 200
        assert answer.content_type == "text/event-stream"


@on_the_nodes
async def test_an_allowed_origin_acts_and_a_followed_link_reads(nodes: Nodes) -> None:
    node = nodes.open
    before = (await state(node))[0]
    assert (await send(node, ACTING["write"], {"Origin": PROXY}))[0] == 201
    # Written as the browser writes it (no default port), or with it: one origin.
    assert (await send(node, ACTING["write"], {"Origin": PROXY + ":443"}))[0] == 201
    assert (await state(node))[0] == before + 2
    # A link to the dashboard followed from another site is a top-level
    # navigation: it reads, and is let in.
    followed = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    assert (await send(node, Call("GET", "/ui"), followed | {"Sec-Fetch-Dest": "document"}))[
        0
    ] == 200
    # A form another site's page posts is a navigation too, but acts: refused.
    form = Call("POST", "/v1/tuples", body=b"job/form")
    assert (await send(node, form, followed | {"Sec-Fetch-Dest": "document"}))[0] == 403


@on_the_nodes
async def test_the_dashboards_pages_cannot_be_framed(nodes: Nodes) -> None:
    """For browsers that do not say what a request is for (no ``Sec-Fetch-Dest``),
    the pages themselves forbid another site to frame them (clickjacking)."""
    async with aiohttp.ClientSession() as http:
        for path in ("/ui", "/ui/prefixes", "/ui/login"):
            async with http.get(nodes.open.url + path) as answer:
                assert answer.status == 200
                assert answer.headers["X-Frame-Options"] == "DENY"
                assert answer.headers["Content-Security-Policy"] == "frame-ancestors 'none'"


def named(node: NodeProcess, name: str) -> dict[str, str]:
    return {"Host": f"{name}:{node.port}"}


@on_the_nodes
async def test_without_a_token_another_host_name_is_misdirected(nodes: Nodes) -> None:
    node = nodes.open
    before = await state(node)
    for name in ("evil.example", "127.0.0.1.evil.example", "localhost.evil.example"):
        for call in (ACTING["write"], ACTING["pause"], Call("GET", "/v1/count?prefix=")):
            status, document = await send(node, call, named(node, name))
            assert (status, document["error"]) == (421, "misdirected_request"), name
            assert "--allow-host" in str(document["message"])
        # The page rebound to the node is same-origin with itself: the Host refuses it.
        same_page = named(node, name) | {"Origin": f"http://{name}:{node.port}"}
        assert await stream_write(node, same_page) == 421
        assert (await send(node, Call("GET", "/v1/watch"), same_page))[0] == 421
        assert (await send(node, Call("POST", "/v1/cluster/replication/pull", json={}), same_page))[
            0
        ] == 421
        assert (await send(node, Call("GET", "/ui"), same_page))[0] == 421
        # Probes answer whatever the name (a load balancer's own).
        assert (await send(node, Call("GET", "/healthz"), named(node, name)))[0] == 200
        assert (await send(node, Call("GET", "/readyz"), named(node, name)))[0] == 200
    assert await state(node) == before


async def test_with_a_cluster_secret_alone_the_peer_routes_answer_any_name(
    forum_nodes: ForumNodes,
) -> None:
    """The signature is what a rebound page lacks there; the client routes,
    with no token, still check the name."""
    node = await forum_nodes.start("secret", "--cluster-secret", "peers-only")
    rebound = named(node, "evil.example")
    assert (await send(node, Call("POST", "/v1/cluster/replication/pull", json={}), rebound))[
        0
    ] == 401
    assert (await send(node, ACTING["write"], rebound))[0] == 421


@on_the_nodes
async def test_without_a_token_the_nodes_own_names_are_answered(nodes: Nodes) -> None:
    node = nodes.open
    names = (
        "localhost", "LOCALHOST.", "ui.localhost", "127.0.0.1", "[::1]", "10.1.2.3",
        ADVERTISED, ALLOWED, socket.gethostname(),
    )  # fmt: skip
    for name in names:
        headers = named(node, name) | {"Origin": f"http://{name}:{node.port}"}
        assert (await send(node, ACTING["write"], headers))[0] == 201, name
        assert await stream_write(node, headers) == 201, name
    assert (await send(node, ACTING["write"], {"Host": "localhost"}))[0] == 201


@on_the_nodes
async def test_with_a_token_any_host_name_is_answered_and_the_token_guards(
    nodes: Nodes,
) -> None:
    node = nodes.guarded
    host = named(node, "evil.example")
    assert (await send(node, ACTING["write"], host))[0] == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert (await send(node, ACTING["write"], host | bearer))[0] == 201
    # The Origin is judged with a token too: a page cannot send the header,
    # but a program that says it is a page is taken at its word.
    assert (await send(node, ACTING["write"], bearer | {"Origin": "http://evil.example"}))[0] == 403


async def signed_in(http: aiohttp.ClientSession, node: NodeProcess) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with http.get(f"{node.url}/ui/session", headers=headers) as answer:
        assert answer.status == 204


@on_the_nodes
async def test_the_cookie_opens_no_stream_for_another_ports_page(nodes: Nodes) -> None:
    """The issue's row: a page on another port of the same host, in a browser
    signed in to the dashboard, opened the stream with the cookie and wrote."""
    node = nodes.guarded
    before = await state(node)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await signed_in(http, node)
        url = f"{node.url}/v1/stream"
        for headers in ({"Origin": another_port(node)}, {"Origin": "null"}, {}):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(url, headers=headers)
            assert refused.value.status == 403, headers
        pause = f"{node.url}/v1/prefixes/job%2F/pause"
        async with http.post(pause, headers={"Origin": another_port(node)}) as answer:
            assert answer.status == 403
        assert await state(node) == before
        # From the node's own page the cookie opens it.
        async with http.ws_connect(url, headers={"Origin": node.url}) as stream:
            await stream.send_bytes(msgpack.packb([1, "write", {"payload": b"job/mine"}]))
            assert msgpack.unpackb((await stream.receive()).data)[1] == 201


async def test_a_dashboard_action_from_another_site_changes_nothing(
    forum_nodes: ForumNodes, redis_url: str
) -> None:
    """The dashboard's own POSTs (the job actions, with ``--lens-url``) pass
    the same guard: a queued job stays queued until the node's own page
    cancels it."""
    node = await forum_nodes.start("lens", "--lens-url", redis_url)
    app = App(node.url, redis_url)

    @app.task(retries=0)
    def later(ctx: Context, n: int) -> int:
        return n

    async with app:
        job = await app.enqueue("later", 1)
        actions = (
            Call("POST", f"/ui/job/cancel?{urlencode({'key': job.key})}"),
            Call("POST", "/ui/jobs/act?action=cancel&state=queued"),
        )
        for call in actions:
            for headers in foreign(node):
                assert (await send(node, call, headers))[0] == 403, (call, headers)
        assert (await app.status(job.key)).state is JobState.QUEUED
        # From the node's own page: done, and sent back to the job's page (303, followed).
        assert (await send(node, actions[0], {"Origin": node.url}))[0] == 200
        assert (await app.status(job.key)).state is JobState.CANCELLED


def dialed_names(launches: list[Launch]) -> set[str]:
    """The host names the nodes and workers of ``launches`` dial nodes by."""
    urls = [
        url
        for launch in launches
        if launch.command == "serve"
        for url in launch.node_config().peers
    ]
    urls += [launch.parse().node for launch in launches if launch.command == "worker"]
    return {urlsplit(url).hostname or "" for url in urls}  # fmt: skip


@pytest.mark.parametrize("where", ["compose", "k8s"])
def test_every_name_the_deploy_files_dial_a_node_by_is_one_it_answers_to(where: str) -> None:
    """deploy/: peers, workers and clients reach nodes by a proxy's or a
    Service's name, which a node without a token must answer to (the k8s
    nodes have one; they would answer without it too)."""
    from forum.node.http.auth import Browsers  # noqa: PLC0415  (here: the module runs on older code)

    docker = Dockerfile()
    if where == "compose":
        launches = list(compose_launches(load_compose(), docker))
        service_names: set[str] = set()
    else:
        k8s = load_k8s()
        launches = [
            *node_launches(k8s, docker, load_compose()),
            worker_launch(k8s, docker, load_compose()),
        ]
        service_names = {
            doc["metadata"]["name"]
            for _, doc in k8s
            if doc["kind"] == "Service"
            and doc["spec"]["selector"].get("app.kubernetes.io/component") == "node"
        }
    names = dialed_names(launches) | service_names
    assert names
    for launch in launches:
        if launch.command == "serve":
            config = dataclasses.replace(launch.node_config(), token=None, read_token=None)
            refused = {n for n in names if not Browsers.of(config).answers_to(n)}
            assert not refused, launch.where


def test_the_rule_knows_the_names_an_operator_wrote() -> None:
    from forum.node.http.auth import Browsers  # noqa: PLC0415  (here: the module runs on older code)

    config = NodeConfig(
        listen="node-a:7070",
        peers=("http://node-b:7070", "http://Node-C.example.:7070"),
        advertise="http://toxiproxy:17071",
        allow_hosts=("Forum-API.internal",),
    )
    names = Browsers.of(config).names
    assert names is not None
    assert {"node-a", "node-b", "node-c.example", "toxiproxy", "forum-api.internal"} <= names
    assert socket.gethostname().lower() in names
    browsers = Browsers.of(config)
    assert browsers.answers_to("FORUM-API.internal.:80")
    assert browsers.answers_to("[fe80::1]:7070")
    assert not browsers.answers_to("node-a.evil.example")
    assert not browsers.answers_to("not a host")
    assert Browsers.of(NodeConfig(token="t")).answers_to("anything.example")
    assert Browsers.of(NodeConfig(listen="[::]:7070")).names is not None


def test_origins_and_host_names_compare_as_browsers_write_them() -> None:
    from forum.node.config.origin import WebOrigin, split_host  # noqa: PLC0415  (as above)

    assert WebOrigin.parse("HTTP://Forum.Example.com") == WebOrigin.parse(
        "http://forum.example.com:80/"
    )
    assert WebOrigin.parse("http://a.example") != WebOrigin.parse("https://a.example")
    assert WebOrigin.parse("https://[::1]:8443") == WebOrigin("https", "::1", 8443)
    assert str(WebOrigin.parse("https://a.example:443")) == "https://a.example"
    assert str(WebOrigin.parse("http://[::1]:7070")) == "http://[::1]:7070"
    assert WebOrigin.serving("http", "[::1]:7070") == WebOrigin.parse("http://[::1]:7070")
    assert WebOrigin.serving("http", "localhost") == WebOrigin.parse("http://localhost:80")
    assert split_host("Node-A.:7070") == ("node-a", 7070)
    assert split_host("10.0.0.5") == ("10.0.0.5", None)
    for bad in ("", "a b", "[::1", "[::1]x", "a:b", "a:99999", "-a.example", "a..b", "::1"):
        with pytest.raises(ValueError):
            split_host(bad)
    for bad in ("null", "*", "file:///x", "http://", "http://a.example/x", "http://u@a.example"):
        with pytest.raises(ValueError):
            WebOrigin.parse(bad)


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--allow-origin", "null", "not an http(s) origin"),
        ("--allow-origin", "*", "not an http(s) origin"),
        ("--allow-origin", "https://forum.example.com/ui", "not an origin"),
        ("--allow-origin", "forum.example.com", "not an http(s) origin"),
        ("--allow-origin", "http://x:99999", "scheme://host[:port]"),
        ("--allow-host", "forum.example.com:443", "without a port"),
        ("--allow-host", "http://forum.example.com", "not a host name"),
    ],
)
def test_a_bad_allowed_origin_or_host_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, said: str
) -> None:
    data = tmp_path / "d"
    result = run_main(["serve", flag, value, "--data-dir", str(data)], capsys)
    assert said in assert_usage_error(result, flag)
    assert not data.exists()


def test_the_lists_come_from_the_file_and_the_environment_too(tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text('allow_origins = ["https://a.example"]\nallow_hosts = ["a.internal"]\n')
    config = NodeConfig.load(toml, {"FORUM_ALLOW_HOSTS": "b.internal, c.internal"}, {})
    assert config.allow_origins == ("https://a.example",)
    assert config.allow_hosts == ("b.internal", "c.internal")
    config = NodeConfig.load(None, {}, {"allow_origins": ["http://b.example:8080"]})
    assert config.allow_origins == ("http://b.example:8080",)
