"""``forum jobs list|show|cancel|retry|purge``: a task app's jobs, from the shell,
and with ``--raw`` every dead letter, whatever parked it (once ``forum dead``).

Each action opens the app (``--app module:name``, for its prefix and
serializer; an ``App()`` with the defaults without it) against ``--node``
and ``--redis-url`` (each: the flag, else ``$FORUM_NODE`` /
``$FORUM_REDIS_URL``, else the app's own), and calls the app's own
inspection (:mod:`forum.tasks.admin`): a listing reads the Lens's job index
(sorted sets per state and task, forum.coordinator.jobindex), so it costs
the same at a million jobs as at a hundred.

Exit codes as every ``forum`` command's (:mod:`forum.cli_args`): 0 done;
1 the job is not there or not in a state for it (``show`` of an unknown
key, ``cancel`` of a job that is over, ``retry`` of a job that is not dead or
whose dead letter was purged); 2 a
usage error; 3 the node or Redis could not be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from forum.cli_app import Where, app_option, load_app, node_from_app, redis_options
from forum.cli_args import (
    COUNT,
    EXIT_NO_MATCH,
    EXIT_NODE,
    EXIT_OK,
    NONEMPTY,
    UsageError,
    checked,
    node_options,
)
from forum.coordinator.deadletter import DeadLetter
from forum.coordinator.errors import LensError
from forum.coordinator.records import HistoryEvent
from forum.tasks import App, InvalidJob, JobNotFound, JobState, JobStatus, TaskError, admin, letters


def _moment(text: str) -> float:
    """A time as Unix seconds: a number, or an ISO 8601 date and time (UTC
    unless it gives its offset)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither Unix seconds nor an ISO 8601 time") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


WHEN = checked(_moment, "time")

#: An action's body, given the open app and the arguments; its exit code.
Action = Callable[[App, argparse.Namespace], Awaitable[int]]
STATES = [state.value for state in JobState]


def add_jobs(parser: argparse.ArgumentParser) -> None:
    """The actions of ``forum jobs`` and their options."""
    parser.description = (
        "A task app's jobs, wherever they are: queued or delayed on a node, running "
        "under a claim, retrying, done (with the result), dead (with the traceback), "
        "expired or cancelled."
    )
    parser.epilog = (
        "examples:\n  forum jobs list --app examples.thumbnails.app:app --state dead\n"
        "  forum jobs show thumb:7:16 --app examples.thumbnails.app:app\n"
        "  forum jobs retry thumb:7:16 --app examples.thumbnails.app:app\n"
        "  forum jobs purge --app examples.thumbnails.app:app\n"
        "  forum jobs list --raw\n  forum jobs retry --raw --all"
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = _action(actions, "list", "list jobs, newest first", _list)
    listing.add_argument("--state", choices=STATES, help="only jobs in this state")
    listing.add_argument("--task", metavar="NAME", type=NONEMPTY, help="only jobs of this task")
    listing.add_argument(
        "--limit", metavar="N", type=COUNT, default=100, help="at most N jobs (default 100)"
    )
    listing.add_argument(
        "--search", metavar="TEXT", type=NONEMPTY, help="only jobs whose arguments hold TEXT"
    )
    listing.add_argument(
        "--key", metavar="PREFIX", type=NONEMPTY, help="only jobs whose key starts with PREFIX"
    )
    for flag, edge in (("--since", "from"), ("--until", "up to")):
        listing.add_argument(
            flag, metavar="WHEN", type=WHEN,
            help=f"only jobs that changed state {edge} WHEN (Unix seconds or ISO 8601, UTC "
            "unless it says)",
        )  # fmt: skip
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.add_argument(
        "--raw",
        action="store_true",
        help="every dead letter under the dead prefix by entry id, a raw worker's too",
    )
    _dead_prefix_option(listing)

    show = _action(actions, "show", "show a job: status, result or error, claim history", _show)
    show.add_argument("key", metavar="KEY", type=NONEMPTY, help="the job's key")
    show.add_argument("--json", action="store_true", help="one JSON object")

    cancel = _action(actions, "cancel", "cancel a job: queued, or running (it is stopped)", _cancel)
    cancel.add_argument("key", metavar="KEY", type=NONEMPTY, help="the job's key")

    retry = _action(actions, "retry", "put a dead job back to work", _retry)
    retry.add_argument(
        "key", metavar="KEY", nargs="*", type=NONEMPTY, help="the job's key (--raw: entry ids)"
    )
    retry.add_argument(
        "--raw", action="store_true", help="KEYs are dead letters' entry ids (jobs list --raw)"
    )
    retry.add_argument("--all", action="store_true", help="with --raw: every dead letter")
    _dead_prefix_option(retry)

    purge = _action(actions, "purge", "drop the dead jobs, or the done jobs' results", _purge)
    purge.add_argument(
        "--state",
        choices=[JobState.DEAD.value, JobState.DONE.value],
        default=JobState.DEAD.value,
        help="dead (default): their letters and records; done: their results (the done "
        "marker stays, so the job still runs once); others' records expire by themselves",
    )


def _dead_prefix_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dead-prefix",
        metavar="PREFIX",
        type=NONEMPTY,
        help="with --raw: where the letters are (a worker's --dead-prefix; default the app's)",
    )


def _raw_prefix(args: argparse.Namespace) -> bytes | None:
    if args.dead_prefix is not None and not args.raw:
        raise UsageError("--dead-prefix is for --raw")
    return None if args.dead_prefix is None else os.fsencode(args.dead_prefix)


def _action(actions: Any, name: str, summary: str, body: Action) -> argparse.ArgumentParser:
    """An action's parser, with the options they all have."""
    parser: argparse.ArgumentParser = actions.add_parser(name, help=summary)
    node_options(parser)
    node_from_app(parser)
    redis_options(parser)
    app_option(parser)
    parser.set_defaults(func=lambda args: _run(args, body))
    return parser


async def _run(args: argparse.Namespace, body: Action) -> int:
    """Open the app ``args`` name and run ``body``; the errors a user can
    meet as one line each."""
    # Importing the user's module reads files: not on the event loop.
    app = await asyncio.to_thread(_app_of, args)
    where = Where.of(args, app)
    try:
        app = app.using(
            nodes=where.node, redis=where.redis_url, token=where.token, namespace=where.namespace
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        async with app:
            return await body(app, args)
    except JobNotFound as exc:
        _say(args, str(exc))
        return EXIT_NO_MATCH
    except TaskError as exc:
        raise UsageError(str(exc)) from None
    except LensError as exc:
        _say(args, f"Redis: {exc}")
        return EXIT_NODE


def _app_of(args: argparse.Namespace) -> App:
    if args.app is None:
        return App()
    sys.path.insert(0, os.path.abspath(args.app_dir))
    return load_app(args.app, need_tasks=False)


def _say(args: argparse.Namespace, message: str) -> None:
    print(f"forum jobs {args.action}: {message}", file=sys.stderr)


# -- the actions -----------------------------------------------------------------------


async def _list(app: App, args: argparse.Namespace) -> int:
    if args.raw:
        filters = (args.state, args.task, args.search, args.key, args.since, args.until)
        if any(given is not None for given in filters):
            raise UsageError("--raw lists every dead letter: not with --state, --task, --search, "
                             "--key, --since or --until")  # fmt: skip
        return await _list_letters(app, args)
    _raw_prefix(args)
    state = None if args.state is None else JobState(args.state)
    found = await admin.listing(
        app, state, args.limit, args.task, key=args.key, text=args.search, since=args.since,
        until=args.until,
    )  # fmt: skip
    if args.json:
        for status in found.jobs:
            print(json.dumps(_plain(status), default=repr))
        return EXIT_OK
    print(_table(found.jobs))
    print(_count(len(found.jobs), found.total, found.complete))
    return EXIT_OK


async def _list_letters(app: App, args: argparse.Namespace) -> int:
    shown = 0
    async for letter in letters.dead_letters(app, _raw_prefix(args)):
        if shown == args.limit:
            if not args.json:  # JSON lines are objects only
                print(f"(the first {shown:,} shown; more: --limit)")
            break
        print(json.dumps(_letter(letter)) if args.json else _describe_letter(letter))
        shown += 1
    return EXIT_OK


async def _show(app: App, args: argparse.Namespace) -> int:
    status = await app.job(args.key).status()
    history = await app.history(args.key)
    if args.json:
        shown = _plain(status)
        shown["history"] = [_event(event) for event in history]
        print(json.dumps(shown, default=repr))
        return EXIT_OK
    print(_describe(status, history))
    return EXIT_OK


async def _cancel(app: App, args: argparse.Namespace) -> int:
    outcome = await app.cancel(args.key)
    if outcome.state == "cancelled" and outcome.owner is not None:
        print(f"cancelled {args.key}: it was running on {outcome.owner}, which stops it")
        return EXIT_OK
    if outcome.state == "cancelled":
        print(f"cancelled {args.key}")
        return EXIT_OK
    _say(args, f"{args.key} is over already: not cancelled")
    return EXIT_NO_MATCH


async def _retry(app: App, args: argparse.Namespace) -> int:
    _raw_prefix(args)  # --dead-prefix without --raw: a usage error
    if args.raw:
        return await _retry_letters(app, args)
    if args.all or len(args.key) != 1:
        raise UsageError("give one KEY (or --raw with entry ids, or --raw --all)")
    [key] = args.key
    status = await app.job(key).status()
    if status.state is not JobState.DEAD:
        _say(args, f"{key} is {status.state.value}, not dead: nothing to retry")
        return EXIT_NO_MATCH
    try:
        await app.retry(key)
    except InvalidJob as exc:  # its letter is gone (purged, or requeued by another)
        _say(args, str(exc))
        return EXIT_NO_MATCH
    print(f"requeued {key}")
    return EXIT_OK


async def _retry_letters(app: App, args: argparse.Namespace) -> int:
    if args.all == bool(args.key):
        raise UsageError("--raw: give dead letters' entry ids, or --all")
    wanted = None if args.all else set(args.key)
    requeued = await letters.requeue_letters(app, wanted, _raw_prefix(args))
    missing = sorted((wanted or set()) - set(requeued))
    for entry in missing:
        _say(args, f"no dead letter {entry}")
    print(f"requeued {len(requeued)}")
    return EXIT_NO_MATCH if missing else EXIT_OK


async def _purge(app: App, args: argparse.Namespace) -> int:
    state = JobState(args.state)
    purged = await app.purge(state)
    what = "results of done jobs" if state is JobState.DONE else "dead jobs"
    print(f"purged {purged:,} {what}")
    return EXIT_OK


# -- how they are shown ----------------------------------------------------------------

_COLUMNS = ("KEY", "TASK", "STATE", "ATTEMPT", "WORKER", "WHEN", "ERROR")
#: A table cell's widest: the error's first line is cut (``jobs show`` has it
#: whole); the key never is, so it can be pasted into ``jobs show``.
_WIDEST = {"ERROR": 60}


def _table(rows: list[JobStatus]) -> str:
    cells = [
        (
            s.key,
            s.task or "?",
            s.state.value,
            "" if s.attempt is None else str(s.attempt),
            s.worker or "",
            _when(s),
            (s.error or "").partition("\n")[0],
        )
        for s in rows
    ]
    cut = [
        tuple(_cut(cell, _WIDEST.get(name)) for name, cell in zip(_COLUMNS, row, strict=True))
        for row in cells
    ]
    widths = [max([len(name), *(len(row[i]) for row in cut)]) for i, name in enumerate(_COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in [_COLUMNS, *cut]]  # fmt: skip
    return "\n".join(lines)


def _count(shown: int, total: int | None, complete: bool = True) -> str:
    """The listing's last line: how many of how many (newest first); a
    search, which does not count, says whether it looked at every job."""
    if total is None:
        if not complete:
            return (f"({shown:,} found, newest first; the search stopped at its budget: "
                    "narrow it with --state, --task, --since or --until)")  # fmt: skip
        return f"({shown:,} found, newest first)"
    if shown == total:
        return f"({total:,} job{'' if total == 1 else 's'}, newest first)"
    return f"({shown:,} of {total:,} jobs, newest first; more: --limit)"


def _cut(text: str, widest: int | None) -> str:
    return text if widest is None or len(text) <= widest else text[: widest - 1] + "…"


def _when(status: JobStatus) -> str:
    """When it is due (delayed, retrying), else when it last changed."""
    if status.state in (JobState.DELAYED, JobState.RETRYING) and status.due is not None:
        return f"due {_time(status.due)}"
    return "" if status.updated is None else _time(status.updated)


def _time(unix: float) -> str:
    return (
        time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(unix)) + f".{int(unix * 1000) % 1000:03d}Z"
    )


def _describe(status: JobStatus, history: list[HistoryEvent]) -> str:
    """``forum jobs show``: the status as ``field: value`` lines, then the history."""
    lines = [f"key:       {status.key}", f"task:      {status.task or '?'}",
             f"state:     {status.state.value}"]  # fmt: skip
    plain = _plain(status)
    for name in ("attempt", "worker", "token"):
        if plain[name] is not None:
            lines.append(f"{name + ':':<10} {plain[name]}")
    for name in ("due", "updated"):
        if plain[name] is not None:
            lines.append(f"{name + ':':<10} {_time(plain[name])}")
    for name in ("progress", "result"):
        if plain[name] is not None:
            lines.append(f"{name + ':':<10} {json.dumps(plain[name], default=repr)}")
    if status.error:
        lines.append(f"error:     {status.error}")
    if status.traceback:
        lines.append("traceback:")
        lines += [f"  {line}" for line in status.traceback.rstrip().splitlines()]
    lines.append("history:" if history else "history:   (none kept)")
    lines += [
        f"  {_time(e.at)}  {e.event:<11} token {e.token}"
        + (f"  {e.owner}" if e.owner else "")
        + (f"  attempt {e.attempt}" if e.attempt else "")
        for e in history
    ]
    return "\n".join(lines)


def _describe_letter(letter: DeadLetter) -> str:
    """A dead letter: one line of what it is, then its error as it was
    raised, a traceback on lines of its own (``repr`` of it was one escaped line)."""
    envelope = letter.envelope
    payload = envelope.payload[:60].decode(errors="backslashreplace")
    head = f"{letter.id}  key={envelope.key}  attempts={envelope.attempt}  payload={payload!r}"
    error = (envelope.error or "(no error kept)").rstrip().splitlines()
    return "\n".join([head, *(f"  {line}" for line in error)])


def _letter(letter: DeadLetter) -> dict[str, Any]:
    envelope = letter.envelope
    return {
        "id": str(letter.id),
        "key": envelope.key,
        "attempts": envelope.attempt,
        "error": envelope.error,
        "payload": envelope.payload.decode(errors="backslashreplace"),
    }


def _plain(status: JobStatus) -> dict[str, Any]:
    shown = _fields(status)
    shown["state"] = status.state.value
    return shown


def _event(event: HistoryEvent) -> dict[str, Any]:
    return _fields(event)


def _fields(record: Any) -> dict[str, Any]:
    return {field.name: getattr(record, field.name) for field in dataclasses.fields(record)}
