"""The processes of a local cluster: nodes, workers, Redis and Toxiproxy.

Each is a :class:`Service`: one subprocess with a fixed port (chosen before it
starts, so the others can be told where it will be), its output in a log file,
and a readiness check. It can be stopped (SIGTERM, then SIGKILL after a
bound), killed (SIGKILL, as in a crash), paused (SIGSTOP: it hangs, still
holding its sockets), and started again on the same port and directory.

Used by ``forum cluster`` and by the tests' fixtures, so both run the same
processes the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import aiohttp

#: How long a service may take to become ready after it was started.
START_DEADLINE = 20.0
#: How long a service may take to exit after SIGTERM before it is killed.
STOP_DEADLINE = 20.0
#: Between readiness checks (the start deadline bounds the total).
_READY_POLL = 0.05
#: Starts of a service whose port was taken before it bound it, then a new port.
_PORT_TRIES = 3
#: What a process says when its port was taken (Python's and aiohttp's words).
_PORT_TAKEN = "address already in use"


def free_port() -> int:
    """A loopback TCP port that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def find_binary(name: str) -> str:
    """The path of ``name`` on PATH; ``FileNotFoundError`` saying how to get it."""
    path = shutil.which(name)
    if path is None:
        raise FileNotFoundError(f"{name} is not on PATH (scripts/install-tools installs it)")
    return path


class Service:
    """One subprocess of the cluster. Subclasses say how to run and probe it."""

    def __init__(self, name: str, root: Path, port: int | None = None) -> None:
        self.name = name
        self.port = port or free_port()
        self.root = root / name
        self.log_path = self.root / f"{name}.log"
        self.env: dict[str, str] = {}
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, port={self.port})"

    # -- what subclasses say ---------------------------------------------------

    def command(self) -> list[str]:
        raise NotImplementedError

    async def ready(self) -> bool:
        """Whether the service answers (called until true or the deadline)."""
        return self.running

    # -- lifecycle -------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.running and self.process else None

    def log_text(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except FileNotFoundError:
            return ""

    #: Whether the service may take another port when its own was taken
    #: between :func:`free_port` and its bind (no one else dials it by that port).
    movable_port = False

    async def start(self, deadline: float = START_DEADLINE) -> None:
        """Start the process and wait until it is ready. A service whose
        port another process took first (:func:`free_port` only says the port
        was free a moment ago) starts again on a new one, if it may move."""
        for _ in range(_PORT_TRIES - 1):
            try:
                return await self._start(deadline)
            except RuntimeError:
                if not (self.movable_port and _PORT_TAKEN in self._this_start_log()):
                    raise
                self.port = free_port()
        await self._start(deadline)

    def _this_start_log(self) -> str:
        return self.log_text().rpartition("--- start ")[2]

    async def _start(self, deadline: float) -> None:
        if self.running:
            raise RuntimeError(f"{self} is already running")
        self.root.mkdir(parents=True, exist_ok=True)
        command = self.command()
        env = {k: v for k, v in os.environ.items() if not k.startswith("FORUM_")}
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as log:  # noqa: ASYNC230 (a local log file, opened once)
            log.write(f"--- start {self.starts + 1}: {' '.join(command)}\n".encode())
            log.flush()
            self.process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                cwd=self.root,
                start_new_session=True,  # Ctrl-C on the launcher is for the launcher
            )
        self.starts += 1
        await self.wait_ready(deadline)

    async def wait_ready(self, deadline: float = START_DEADLINE) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + deadline
        while not await self.ready():
            if not self.running:
                raise RuntimeError(f"{self} exited while starting:\n{self.log_text()}")
            if loop.time() > until:
                raise TimeoutError(f"{self} not ready in {deadline} s:\n{self.log_text()}")
            await asyncio.sleep(_READY_POLL)

    async def stop(self, deadline: float = STOP_DEADLINE) -> int | None:
        """SIGTERM and wait for the exit (SIGKILL after ``deadline``); the exit code."""
        return await self.end(signal.SIGTERM, deadline)

    async def kill(self) -> int | None:
        """SIGKILL: the process dies at once, as in a crash."""
        return await self.end(signal.SIGKILL, STOP_DEADLINE)

    async def restart(self, deadline: float = START_DEADLINE) -> None:
        if self.running:
            await self.stop()
        await self.start(deadline)

    def pause(self) -> None:
        """SIGSTOP: the process hangs (its sockets stay open, nothing answers)."""
        self.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.send_signal(signal.SIGCONT)

    def send_signal(self, signum: int) -> None:
        if self.process is None or not self.running:
            raise RuntimeError(f"{self} is not running")
        self.process.send_signal(signum)

    async def end(self, signum: int, deadline: float = STOP_DEADLINE) -> int | None:
        """Send ``signum`` and wait for the exit, killing the process after
        ``deadline`` seconds; its exit code (``None`` if it never started)."""
        process = self.process
        if process is None:
            return None
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)  # a paused process cannot act on TERM
                process.send_signal(signum)
            try:
                async with asyncio.timeout(deadline):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        return process.returncode


async def http_ok(url: str) -> bool:
    timeout = aiohttp.ClientTimeout(total=1)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as r:
            return r.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


class NodeService(Service):
    """``forum serve`` on ``127.0.0.1:port`` with its data under ``root/name``."""

    def __init__(
        self,
        name: str,
        root: Path,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        super().__init__(name, root, port)
        self.data_dir = self.root / "data"
        self.args = list(args)
        self.env.update(env or {})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "forum", "serve",
            "--listen", f"127.0.0.1:{self.port}",
            "--data-dir", str(self.data_dir),
            "--node-id", self.name,
            *self.args,
        ]  # fmt: skip

    async def ready(self) -> bool:
        return await http_ok(self.url + "/readyz")


class WorkerService(Service):
    """``forum worker`` against one node and the Lens's Redis."""

    movable_port = True  # its metrics port: only the launcher reads it

    def __init__(self, name: str, root: Path, args: Sequence[str]) -> None:
        super().__init__(name, root)
        self.args = list(args)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "forum", "worker", "--metrics-port", str(self.port),
                *self.args]  # fmt: skip

    async def ready(self) -> bool:
        return await http_ok(f"http://127.0.0.1:{self.port}/metrics")


class RedisService(Service):
    """``redis-server`` made durable the way the Lens needs it: AOF, fsync always."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [
            find_binary("redis-server"),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--dir", str(self.root),
            "--protected-mode", "no",
        ]  # fmt: skip

    async def ready(self) -> bool:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return False
        try:
            writer.write(b"PING\r\n")
            await writer.drain()
            async with asyncio.timeout(1):
                return (await reader.readline()).startswith(b"+PONG")
        except (OSError, TimeoutError):
            return False
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


class ToxiproxyService(Service):
    """``toxiproxy-server``; its HTTP API on ``port``."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [find_binary("toxiproxy-server"), "-host", "127.0.0.1", "-port", str(self.port)]

    async def ready(self) -> bool:
        return await http_ok(self.url + "/version")
