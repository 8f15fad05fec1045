"""Another site's page in a real headless Chromium cannot write through a
node (the issue's rows: a page on another port of the same host in a browser
signed in to the dashboard opened the stream with the cookie and wrote; on a
node without a token any page wrote by WebSocket and by a ``text/plain``
form). The foreign page is served by a real ``python -m http.server`` on
another port of 127.0.0.1; each attack (a WebSocket on ``/v1/stream`` that
writes and takes, a no-cors ``fetch`` POST with the cookie, a form POST) is
made by a script in that page, and then from the node's own page, where the
very same scripts act (so a refusal is the node's, not the script's); a
frame of the signed-in dashboard there shows none of its buttons. A
DNS-rebound page (Chromium told that ``rebound.test`` is 127.0.0.1) is
same-origin with the node in the browser's eyes: the node's ``Host`` check
refuses it. The server-side rule is node/forum/node/http/auth.py's ``browser_guard``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from selenium.webdriver.common.by import By

from forum.node.client.remote import ForumClient
from forum.node.core.space import Pattern
from tests.dashboard.browser import Browser, launch
from tests.fixtures.nodes import ForumNodes, NodeProcess, eventually, free_port

pytestmark = pytest.mark.slow

TOKEN = "s3cret"
#: The name Chromium resolves to 127.0.0.1 itself: what DNS rebinding does.
REBOUND = "rebound.test"

#: Opens the stream, writes ``job/ws`` and takes from ``job/``; what happened
#: ("open", each answer's id and status, "closed CODE").
STREAM = """
const [node, done] = [arguments[0], arguments[arguments.length - 1]];
function frame(id, op, key, value) {
  const text = new TextEncoder();
  const [o, k, v] = [text.encode(op), text.encode(key), text.encode(value)];
  return new Uint8Array([0x93, id, 0xa0 | o.length, ...o, 0x81, 0xa0 | k.length, ...k,
                         0xc4, v.length, ...v]);
}
const seen = [];
const finish = () => done(seen.join(","));
const socket = new WebSocket(node.replace("http:", "ws:") + "/v1/stream");
socket.binaryType = "arraybuffer";
socket.onopen = () => {
  seen.push("open");
  socket.send(frame(1, "write", "payload", "job/ws"));
  setTimeout(() => socket.send(frame(2, "take", "prefix", "job/seed")), 300);
  setTimeout(() => socket.close(), 1500);
};
socket.onmessage = (message) => {
  const b = new Uint8Array(message.data);  // [id, status, body]: status a uint8 (0xcc)
  seen.push("answer " + b[1] + " " + (b[2] === 0xcc ? b[3] : b[2]));
};
socket.onclose = (event) => { seen.push("closed " + event.code); finish(); };
"""
#: A no-cors POST of ``job/fetched`` with the cookie: the page sees nothing of
#: the answer, but the request is made.
FETCH = """
const [node, done] = [arguments[0], arguments[arguments.length - 1]];
fetch(node + "/v1/tuples", {method: "POST", mode: "no-cors", credentials: "include",
                            body: "job/fetched"})
  .then((answer) => done("sent " + answer.type), (error) => done("failed " + error));
"""
#: A cross-site form POST, ``text/plain`` (the body ``job/formed=x``), into a frame.
FORM = """
const [node, done] = [arguments[0], arguments[arguments.length - 1]];
const sink = document.createElement("iframe");
sink.name = "sink" + Date.now();
document.body.appendChild(sink);
const form = document.createElement("form");
Object.assign(form, {method: "POST", action: node + "/v1/tuples", enctype: "text/plain",
                     target: sink.name});
const field = document.createElement("input");
Object.assign(field, {name: "job/formed", value: "x"});
form.appendChild(field);
document.body.appendChild(form);
sink.onload = () => done("loaded");
setTimeout(() => done("no load"), 10000);
form.submit();
"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with launch(tmp_path_factory, f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1") as started:
        started.driver.set_script_timeout(30)
        yield started


@pytest_asyncio.fixture
async def elsewhere(tmp_path: Path) -> AsyncIterator[str]:
    """Another site's page: a real HTTP server on another port of 127.0.0.1. Its URL."""
    root = tmp_path / "elsewhere"
    root.mkdir()
    (root / "index.html").write_text("<!doctype html><title>elsewhere</title><p>elsewhere</p>")
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
        "--directory", str(root),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        await eventually(lambda: _answers(port), what="the other site's server")
        yield url + "/"
    finally:
        server.terminate()
        await server.wait()


async def _answers(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


#: Frames ``arguments[0]`` in the page, as ``#framed``; done once it loaded.
FRAME = """
const [url, done] = [arguments[0], arguments[arguments.length - 1]];
const frame = Object.assign(document.createElement("iframe"), {id: "framed", src: url});
frame.onload = () => done();
setTimeout(done, 10000);
document.body.appendChild(frame);
"""


def buttons_framed(page: Browser, url: str) -> int:
    """How many buttons of ``url`` a frame in the page shows (clickjacking)."""
    page.driver.execute_async_script(FRAME, url)
    page.driver.switch_to.frame("framed")
    try:
        return len(page.driver.find_elements(By.CSS_SELECTOR, "button"))
    finally:
        page.driver.switch_to.default_content()


def attack(page: Browser, node_url: str) -> dict[str, str]:
    """Each script run in the page ``page`` shows, against ``node_url``."""
    return {
        name: page.driver.execute_async_script(script, node_url)
        for name, script in (("stream", STREAM), ("fetch", FETCH), ("form", FORM))
    }


async def payloads(node: NodeProcess) -> list[bytes]:
    async with ForumClient(node.url, token=node.token) as client:
        return [t.payload for t in (await client.list(Pattern(b"job/"))).tuples]


async def seeded(node: NodeProcess) -> None:
    async with ForumClient(node.url, token=node.token) as client:
        await client.write(b"job/seed")


async def only_the_nodes_own_page_acts(page: Browser, node: NodeProcess, elsewhere: str) -> None:
    """The attacks from ``elsewhere`` write and take nothing; from the node's
    own page they act (a refusal is the node's, not the scripts')."""
    page.open(elsewhere)
    done = attack(page, node.url)
    assert "open" not in done["stream"] and "answer" not in done["stream"], done
    assert await payloads(node) == [b"job/seed"], done

    page.open(f"{node.url}/ui")
    done = attack(page, node.url)
    assert done["stream"].startswith("open,answer 1 201,answer 2 200"), done
    assert sorted(await payloads(node)) == [b"job/fetched", b"job/formed=x\r\n", b"job/ws"], done


async def test_a_page_on_another_port_cannot_act_through_a_signed_in_browser(
    browser: Browser, forum_nodes: ForumNodes, elsewhere: str
) -> None:
    node = await forum_nodes.start("signed-in", token=TOKEN)
    await seeded(node)
    browser.reset()
    browser.open(f"{node.url}/ui/login")
    browser.find("#token").send_keys(TOKEN)
    browser.find("#login button").click()
    browser.until(lambda: browser.find(".scope").text == "full access", "signed in")
    browser.open(f"{node.url}/ui/prefixes")  # what a frame would show: a pause button
    browser.until(lambda: browser.texts("button[data-action='pause']"), "the pause button")
    browser.open(elsewhere)
    assert buttons_framed(browser, f"{node.url}/ui/prefixes") == 0
    # The cookie alone: the scripts send no token of their own.
    await only_the_nodes_own_page_acts(browser, node, elsewhere)
    browser.reset()


async def test_a_page_on_another_port_cannot_write_to_a_node_without_a_token(
    browser: Browser, forum_nodes: ForumNodes, elsewhere: str
) -> None:
    node = await forum_nodes.start("open")
    await seeded(node)
    browser.reset()
    await only_the_nodes_own_page_acts(browser, node, elsewhere)
    browser.reset()


async def test_a_rebound_page_cannot_write_to_a_node_without_a_token(
    browser: Browser, forum_nodes: ForumNodes
) -> None:
    """What a page of ``rebound.test`` can do once its name answers with the
    node's address: to the browser, the node is that page's own origin."""
    node = await forum_nodes.start("rebound")
    await seeded(node)
    browser.reset()
    rebound = f"http://{REBOUND}:{node.port}"
    browser.open(f"{rebound}/v1/status")
    shown = browser.find("body").text
    done = attack(browser, rebound)
    assert "open" not in done["stream"] and "answer" not in done["stream"], done
    assert await payloads(node) == [b"job/seed"], done
    assert "misdirected_request" in shown
    browser.reset()
