"""The task app a command names, and where the command points: the options
``forum worker`` and ``forum jobs`` share, and the cluster a worker opens
(:func:`cluster_space`).

``--app MODULE:NAME`` (imported from ``--app-dir``: :func:`load_app`, or any
``module:name`` with :func:`resolve`), and ``--node``, ``--token``,
``--redis-url`` and ``--namespace``, each resolved by :class:`Where`: the
flag, else its environment variable, else the app's, else the default.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import traceback
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from forum.cli_args import NONEMPTY, UsageError, checked
from forum.coordinator.keys import DEFAULT_NAMESPACE
from forum.coordinator.redis_url import DEFAULT_REDIS_URL, RedisTarget
from forum.coordinator.settings import LensConfig
from forum.node.client.cluster import ClusterClient
from forum.node.cluster.map import load_map
from forum.node.config.node import DEFAULT_NODE
from forum.node.core.errors import ClusterMapError, Unauthorized
from forum.node.core.urls import node_url
from forum.tasks import App
from forum.tasks.cluster import worker_cluster


def _directory(text: str) -> str:
    if not os.path.isdir(text):
        raise ValueError(f"{text!r} is not a directory")
    return text


def _redis_url(text: str) -> str:
    RedisTarget.from_url(text)  # one server or a cluster (forum.coordinator.redis_url)
    return text


DIRECTORY = checked(_directory, "directory")
REDIS_URL = checked(_redis_url, "URL")


def redis_options(parser: argparse.ArgumentParser) -> None:
    """``--redis-url`` (alias ``--redis``) and ``--namespace``: the Lens's
    Redis, for ``forum worker`` and ``forum jobs``. Both default to ``None``:
    :class:`Where` resolves them (an app's own when neither the flag nor
    ``$FORUM_REDIS_URL`` is given)."""
    add = parser.add_argument
    add(
        "--redis-url",
        "--redis",
        dest="redis_url",
        metavar="URL",
        type=REDIS_URL,
        help="the Lens's Redis: redis://host:port/db, a Sentinel-managed primary as "
        "redis+sentinel://host:port[,...]/name, or a Redis Cluster as "
        "redis+cluster://host:port[,...]/ (default $FORUM_REDIS_URL, else --app's, else "
        f"{DEFAULT_REDIS_URL})",
    )
    add(
        "--namespace",
        metavar="NS",
        type=NONEMPTY,
        help=f"prefix of the Lens's Redis keys (default --app's, else {DEFAULT_NAMESPACE})",
    )


def node_from_app(parser: argparse.ArgumentParser) -> None:
    """``--node`` (of :func:`forum.cli_args.node_options`, added already)
    defaults to ``None``: :class:`Where` resolves it, the app's own when
    neither the flag nor ``$FORUM_NODE`` is given."""
    parser.set_defaults(node=None)
    for action in parser._actions:
        if action.dest == "node":
            action.help = f"the node's URL (default $FORUM_NODE, else --app's, else {DEFAULT_NODE})"


def app_option(parser: argparse.ArgumentParser, required: bool = False) -> None:
    """``--app MODULE:NAME`` and ``--app-dir``: a task app (:class:`forum.App`)."""
    parser.add_argument(
        "--app",
        metavar="MODULE:NAME",
        required=required,
        help="a task app (forum.App): its prefix, serializer, node and Redis",
    )
    parser.add_argument(
        "--app-dir",
        metavar="DIR",
        type=DIRECTORY,
        default=".",
        help="where --app, --handler and --key modules are imported from (default .)",
    )


def resolve(flag: str, spec: str) -> Any:
    """The object ``module:name`` names; a :class:`UsageError` that tells a
    missing module from a module that fails to import."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"{flag} {spec!r} is not module:name")
    try:
        found: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise UsageError(
                f"{flag} {spec}: module {module_name!r} not found "
                "(looked in --app-dir and the installed packages)"
            ) from None
        raise UsageError(
            f"{flag} {spec}: cannot import {module_name}: {_where_failed(exc)}{exc}"
        ) from None
    except Exception as exc:
        # The user's module raised while importing: what, and where (its file and line).
        raise UsageError(
            f"{flag} {spec}: cannot import {module_name}: "
            f"{type(exc).__name__} at {_where_failed(exc)}{_message(exc)}"
        ) from None
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise UsageError(f"{flag} {spec}: {module_name!r} has no {attribute!r}") from None
    return found


def _where_failed(exc: BaseException) -> str:
    """``file:line: `` of what failed to import: a syntax error's own place,
    else the innermost frame of the traceback (where the module raised)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{_shown(exc.filename)}:{exc.lineno}: "
    frames = traceback.extract_tb(exc.__traceback__)
    # The first frame is resolve's, the import machinery's are frozen: the last other one.
    theirs = [f for f in frames[1:] if not f.filename.startswith("<frozen importlib")]
    if not theirs:
        return ""
    return f"{_shown(theirs[-1].filename)}:{theirs[-1].lineno}: "


def _message(exc: BaseException) -> str:
    """An exception's text on one line (a syntax error's without its place,
    which is said before it)."""
    text = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    return " ".join(str(text).split())


def _shown(filename: str) -> str:
    """A file name relative to the working directory when it is under it."""
    relative = os.path.relpath(filename)
    return filename if relative.startswith("..") else relative


def load_app(spec: str, *, need_tasks: bool = True) -> App:
    """The task app ``module:name`` names; a worker's (``need_tasks``) has at
    least one task, and each is callable."""
    app = resolve("--app", spec)
    if not isinstance(app, App):
        raise UsageError(f"--app {spec}: a {type(app).__name__}, not a task app (forum.App)")
    if need_tasks and not app.tasks:
        raise UsageError(f"--app {spec}: the app has no tasks: nothing for a worker to run")
    for name, task in app.tasks.items():
        if not callable(getattr(task, "function", None)):
            raise UsageError(f"--app {spec}: task {name!r} is not callable")
    return app


@dataclass(frozen=True, slots=True)
class Where:
    """The node, Redis and key namespace a command uses: each flag, else its
    environment variable, else the app's (with ``--app``), else the default."""

    node: str
    redis_url: str
    namespace: str
    token: str | None

    @classmethod
    def of(cls, args: argparse.Namespace, app: App | None) -> Where:
        node = args.node or _from_env("FORUM_NODE", node_url)
        redis = args.redis_url or _from_env("FORUM_REDIS_URL", _redis_url)
        return cls(
            node=node or (app.nodes[0] if app is not None else DEFAULT_NODE),
            redis_url=redis or (app.redis if app is not None else DEFAULT_REDIS_URL),
            namespace=args.namespace or (app.namespace if app is not None else DEFAULT_NAMESPACE),
            token=args.token or (app.token if app is not None else None),
        )


def _from_env(name: str, check: Callable[[str], str]) -> str | None:
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return check(value)
    except ValueError as exc:
        raise UsageError(f"${name}: {exc}") from None


def node_urls_of(args: argparse.Namespace, where: Where, app: App | None) -> list[str]:
    """The nodes a command may ask first: ``--node`` (or ``$FORUM_NODE``)
    when given, else every node of the app, else the default."""
    if app is not None and args.node is None and not os.environ.get("FORUM_NODE"):
        return list(app.nodes)
    return [where.node]


@contextlib.asynccontextmanager
async def cluster_space(
    urls: Sequence[str],
    token: str | None,
    config: LensConfig,
    *,
    cluster_map: str | None,
    owner: str,
) -> AsyncIterator[ClusterClient]:
    """A worker's tuple space for the body: the cluster of the
    ``cluster_map`` file, else the one whose map the first of ``urls`` to
    answer serves (those nodes as one group when it has none: a worker as
    before), with the directory (:func:`forum.tasks.cluster.worker_cluster`).
    A wrong file, token or map is a :class:`UsageError`."""
    cluster = None
    if cluster_map is not None:
        try:
            cluster = await asyncio.to_thread(load_map, cluster_map)
        except ClusterMapError as exc:
            raise UsageError(f"--cluster-map: {exc}") from None
    async with contextlib.AsyncExitStack() as stack:
        try:  # what opening it raises only: the body's errors are the worker's
            space = await stack.enter_async_context(
                worker_cluster(urls, token, config, owner, cluster)
            )
        except Unauthorized as exc:
            raise UsageError(f"--token: {exc}") from None
        except ClusterMapError as exc:
            raise UsageError(f"--node {urls[0]}: {exc}") from None
        yield space
