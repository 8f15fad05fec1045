"""The user's code ``forum worker`` runs: what ``--app``, or ``--handler``
and ``--key``, name (:class:`UserCode`, imported by :func:`load_user_code`),
and the handler opened (:func:`open_handler`): an ``async def handler(job)``
itself, or what the async context manager a function of no arguments
returns yields. Each mistake in them is one :class:`UsageError` line.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from forum.cli_app import load_app, resolve
from forum.cli_args import UsageError
from forum.coordinator.job import Handler, KeyFunction
from forum.tasks import App


@dataclass(frozen=True, slots=True)
class UserCode:
    """What ``--app``, or ``--handler`` and ``--key``, named."""

    app: App | None = None
    handler: Any = None
    key: KeyFunction | None = None

    def describe(self, args: argparse.Namespace) -> str:
        if self.app is None:
            return f"taking {args.prefix!r}"
        periodic = f", {len(self.app.periodic)} periodic" if self.app.periodic else ""
        count = len(self.app.tasks)
        names = ", ".join(sorted(self.app.tasks))
        queues = (
            "" if args.queues is None
            else " from queues " + ",".join(f"{q}:{w}" for q, w in args.queues.items())
        )  # fmt: skip
        return f"running {args.app} ({count} task{'s' * (count != 1)}: {names}{periodic}){queues}"


def load_user_code(args: argparse.Namespace) -> UserCode:
    sys.path.insert(0, os.path.abspath(args.app_dir))
    if args.app is not None:
        return UserCode(app=load_app(args.app))
    handler = resolve("--handler", args.handler)
    return UserCode(handler=handler, key=resolve("--key", args.key) if args.key else None)


def _is_async(function: Any) -> bool:
    call = getattr(type(function), "__call__", None)  # noqa: B004 - an object with an async __call__
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)


def _needs_arguments(function: Any) -> bool:
    try:
        inspect.signature(function).bind()
    except TypeError:
        return True
    except ValueError:  # no signature to be had (a builtin): call it and see
        return False
    return False


@contextlib.asynccontextmanager
async def open_handler(spec: str, source: Any) -> AsyncIterator[Handler]:
    """The handler ``source`` names: itself, or what its context manager yields."""
    if _is_async(source):
        if not _needs_arguments(source):
            raise UsageError(
                f"--handler {spec}: takes no job; a handler is 'async def handler(job)'"
            )
        yield source
        return
    if not callable(source):
        raise UsageError(f"--handler {spec}: a {type(source).__name__}, not a function")
    if _needs_arguments(source):
        # A def handler(job): the worker would await what it returns, on every job.
        raise UsageError(f"--handler {spec}: not async; a handler is 'async def handler(job)'")
    opened: Any = source()
    if not hasattr(opened, "__aenter__"):
        raise UsageError(
            f"--handler {spec}: returns a {type(opened).__name__}, not an async context "
            "manager yielding a handler"
        )
    async with contextlib.AsyncExitStack() as stack:
        try:
            handler = await stack.enter_async_context(opened)
        except Exception as exc:
            # Opening is the user's code (connections, settings): say what failed.
            raise UsageError(
                f"--handler {spec}: opening it failed: {type(exc).__name__}: {exc}"
            ) from None
        yield handler
