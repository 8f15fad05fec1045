"""The Toxiproxy fixture (reused by the chaos suite): proxies, links, cuts, toxics."""

from __future__ import annotations

import asyncio

import pytest

from tests.fixtures.toxiproxy import Toxiproxy, ToxiproxyError, link_name

pytestmark = pytest.mark.chaos


async def echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def round_trip(listen: str) -> bytes:
    host, port = listen.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"ping")
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(4), 5)
    finally:
        writer.close()
        await writer.wait_closed()


async def test_links_partitions_and_toxics(toxiproxy: Toxiproxy) -> None:
    assert await toxiproxy.version()
    server, port = await echo_server()
    async with server:
        links = await toxiproxy.links({"a": f"127.0.0.1:{port}", "b": f"127.0.0.1:{port}"})
        assert set(links) == {("a", "b"), ("b", "a")}
        assert links["a", "b"].name == link_name("a", "b")
        assert await round_trip(links["a", "b"].listen) == b"ping"

        async with toxiproxy.partition(links, {"a"}, {"b"}):
            assert not (await toxiproxy.proxies())[link_name("b", "a")].enabled
            with pytest.raises(OSError):
                await round_trip(links["a", "b"].listen)
        assert await round_trip(links["a", "b"].listen) == b"ping"

        toxic = await toxiproxy.add_toxic(links["a", "b"].name, "latency", {"latency": 200})
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await round_trip(links["a", "b"].listen) == b"ping"
        assert loop.time() - started >= 0.2
        await toxiproxy.remove_toxic(links["a", "b"].name, toxic)

        with pytest.raises(ToxiproxyError) as refused:
            await toxiproxy.create(link_name("a", "b"), f"127.0.0.1:{port}")
        assert refused.value.status == 409
