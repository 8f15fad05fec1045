"""Who may see and do what through the dashboard, over plain HTTP against a
real ``forum serve`` with a token and a read token (node/forum/node/http/auth.py): the
pages need a credential, the read token reads and is refused every action
(which changes nothing), the cookie the login sets stands for the header,
and an action on the cookie's strength must come from the node's own pages.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from yarl import URL

from tests.fixtures.cli import assert_usage_error, run_main
from tests.fixtures.nodes import ForumNodes, NodeProcess

TOKEN, READ = "s3cret", "look"
PAGES = ("/ui", "/ui/prefixes", "/ui/peers", "/ui/guarantees")

#: The tests share the module's node, so they share its event loop.
on_the_node = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def node(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[NodeProcess]:
    nodes = ForumNodes(Path(tmp_path_factory.mktemp("access")))
    try:
        yield await nodes.start("guarded", "--read-token", READ, token=TOKEN)
    finally:
        await nodes.aclose()


async def status_of(
    node: NodeProcess, method: str, path: str, token: str | None = None, **kwargs: object
) -> int:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, node.url + path, headers=headers, **kwargs) as answer,  # type: ignore[arg-type]
    ):
        return answer.status


async def paused(node: NodeProcess) -> list[object]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{node.url}/v1/prefixes", headers={"Authorization": f"Bearer {TOKEN}"}) as a,
    ):
        return [p["prefix"] for p in (await a.json())["prefixes"] if p["paused"]]


@on_the_node
@pytest.mark.parametrize("path", PAGES)
async def test_each_page_needs_a_token_and_either_token_opens_it(
    node: NodeProcess, path: str
) -> None:
    assert await status_of(node, "GET", path) == 401
    assert await status_of(node, "GET", path, "wrong") == 401
    assert await status_of(node, "GET", path, READ) == 200
    assert await status_of(node, "GET", path, TOKEN) == 200


@on_the_node
async def test_a_refusal_says_where_a_browser_signs_in(node: NodeProcess) -> None:
    async with aiohttp.ClientSession() as http, http.get(f"{node.url}/ui") as answer:
        assert answer.status == 401
        assert "sign in at /ui/login" in (await answer.json())["message"]


#: What Chromium sends when it navigates to a page.
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@on_the_node
async def test_a_browser_without_the_token_is_sent_to_sign_in_and_the_api_keeps_its_401(
    node: NodeProcess,
) -> None:
    async with aiohttp.ClientSession() as http:
        for cookie in ({}, {"Cookie": "forum_token=wrong"}):
            async with http.get(
                f"{node.url}/ui/peers?x=1", headers=BROWSER | cookie, allow_redirects=False
            ) as answer:
                assert answer.status == 303
                sent_to = URL(answer.headers["Location"])
                assert sent_to.path == "/ui/login" and not sent_to.host
                assert sent_to.query["next"] == "/ui/peers?x=1"
        async with http.get(node.url + str(sent_to)) as answer:
            assert answer.status == 200
            assert 'data-next="/ui/peers?x=1"' in await answer.text()
        # Not a browser asking for a page: the API's 401, as before.
        for method, path, headers in (
            ("GET", "/ui/peers", {"Accept": "application/json"}),  # a script's fetch
            ("GET", "/ui/peers", {}),
            ("GET", "/v1/status", BROWSER),  # an API route, even from a browser
            ("GET", "/metrics", BROWSER),
            ("GET", "/ui/session", BROWSER | {"Authorization": "Bearer wrong"}),
        ):
            async with http.request(
                method, node.url + path, headers=headers, allow_redirects=False
            ) as answer:
                assert answer.status == 401, (method, path)
                assert (await answer.json())["error"] == "unauthorized"


@on_the_node
@pytest.mark.parametrize(
    "target",
    [
        "//elsewhere.example/ui",
        "http://elsewhere.example/ui",
        "/\\elsewhere.example/ui",
        "/ui\\..\\x",
        "/v1/status",
        "/uix",
        "/ui/peers\n",
        "",
    ],
)
async def test_the_login_sends_a_browser_back_only_to_a_page_of_this_dashboard(
    node: NodeProcess, target: str
) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{node.url}/ui/login", params={"next": target}) as answer,
    ):
        assert answer.status == 400
        assert "next must be a path of this node's dashboard" in await answer.text()


@on_the_node
async def test_the_login_page_and_its_assets_are_open(node: NodeProcess) -> None:
    for path in ("/ui/login", "/ui/static/dashboard.js", "/ui/static/dashboard.css"):
        assert await status_of(node, "GET", path) == 200
    assert await status_of(node, "GET", "/ui/static/missing.js") == 401


@on_the_node
async def test_the_read_token_reads_and_is_refused_every_action(node: NodeProcess) -> None:
    assert await status_of(node, "GET", "/v1/status", READ) == 200
    assert await status_of(node, "GET", "/metrics", READ) == 200
    assert await status_of(node, "POST", "/v1/prefixes/job%2F/pause", READ) == 403
    assert await status_of(node, "POST", "/v1/tuples", READ, data=b"job/1") == 403
    assert await status_of(node, "POST", "/v1/take?prefix=job/", READ) == 403
    # The stream is a GET, but its frames write and take.
    assert await status_of(node, "GET", "/v1/stream", READ) == 403
    assert await paused(node) == []
    assert await status_of(node, "GET", "/v1/count?prefix=job/", TOKEN) == 200


@on_the_node
async def test_the_session_cookie_stands_for_the_header_and_acts_only_from_the_node(
    node: NodeProcess,
) -> None:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with http.get(f"{node.url}/ui/session", headers=headers) as answer:
            assert answer.status == 204
            cookie = answer.cookies["forum_token"]
            assert cookie["httponly"] and cookie["samesite"] == "Strict"
        async with http.get(f"{node.url}/ui/prefixes") as answer:
            assert answer.status == 200
        pause = f"{node.url}/v1/prefixes/job%2F/pause"
        for origin in ({}, {"Origin": "http://elsewhere.example"}):
            async with http.post(pause, headers=origin) as answer:
                assert answer.status == 403
        assert await paused(node) == []
        async with http.post(pause, headers={"Origin": node.url}) as answer:
            assert answer.status == 201
        assert await paused(node) == ["job/"]
        async with http.post(f"{node.url}/v1/prefixes/job%2F/resume", headers={"Origin": node.url}):
            pass
    assert await paused(node) == []


def test_a_read_token_without_a_token_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "d"
    result = run_main(["serve", "--read-token", READ, "--data-dir", str(data)], capsys)
    assert "read_token needs a token" in assert_usage_error(result, "--read-token")
    assert not data.exists()


def test_a_lens_url_that_is_no_redis_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "d"
    result = run_main(["serve", "--lens-url", "http://x:1/", "--data-dir", str(data)], capsys)
    assert "is not a Redis URL" in assert_usage_error(result, "http://x:1/")
    assert not data.exists()


@on_the_node
async def test_prefixes_by_separator_count_live_delayed_and_reserved(node: NodeProcess) -> None:
    """The read route behind the Prefixes panel (``GET /v1/prefixes?separator=``)."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=auth) as http:
        for payload, query in (
            (b"q/a/1", ""),
            (b"q/a/2", ""),
            (b"q/b", ""),
            (b"r/x", "?delay=600"),
        ):
            async with http.post(f"{node.url}/v1/tuples{query}", data=payload) as answer:
                assert answer.status == 201
        async with http.post(f"{node.url}/v1/reserve?prefix=q/b&lease=60") as answer:
            assert answer.status == 200
        async with http.get(f"{node.url}/v1/prefixes?separator=/") as answer:
            rows = {row.pop("prefix"): row for row in (await answer.json())["prefixes"]}
        async with http.get(f"{node.url}/v1/prefixes") as answer:
            plain = (await answer.json())["prefixes"]
    figures = {"paused": False, "held": None, "limit": None}
    age = rows["q/"].pop("oldest_age")  # q/a/1's, dated by the node's first notes
    assert isinstance(age, float) and 0 <= age < 60
    assert rows["q/"] == {**figures, "live": 2, "delayed": 0, "reserved": 1}
    assert rows["r/"] == {**figures, "live": 0, "delayed": 1, "reserved": 0, "oldest_age": None}
    assert all("live" not in row and "oldest_age" not in row for row in plain)


async def test_a_node_only_install_serves_the_dashboard_and_refuses_a_lens_url() -> None:
    """Without the Redis client the dashboard loads (its Lens panels say there
    is none); ``--lens-url`` is then a one-line usage error, nothing created."""
    probe = (
        "import sys; sys.modules['redis'] = None\n"
        "from forum.cli_serve import node_extensions\n"
        "from forum.node.config.node import NodeConfig\n"
        "node_extensions(NodeConfig())\n"
        "print(sorted(m for m in ('tasks', 'coordinator') if m in sys.modules))\n"
        "from forum.cli import main\n"
        "lens = ['--lens-url', 'redis://127.0.0.1:1/0']\n"
        "sys.exit(main(['serve', *lens, '--data-dir', sys.argv[1]]))"
    )
    with tempfile.TemporaryDirectory() as root:
        data = Path(root) / "never"
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", probe, str(data),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        assert process.returncode == 2
        assert out.decode() == "[]\n"
        assert err.decode().splitlines() == [
            "forum serve: lens_url needs the Redis client, not here: "
            "import of redis halted; None in sys.modules"
        ]
        assert not data.exists()
