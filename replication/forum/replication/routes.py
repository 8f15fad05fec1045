"""The replication routes peers call, under the node's ``/v1/cluster/`` prefix.

==========================================  ====================================
``POST /v1/cluster/replication/push``        a push: entries to apply -> push_ack
``POST /v1/cluster/replication/pull``        a pull: "my vector" -> a page
``GET  /v1/cluster/replication/members``     this node and the peers it reaches
==========================================  ====================================

Every request is checked before anything changes, like client input:

* 401 without valid proof of the cluster key (see :mod:`forum.replication.auth`),
  or with proof for another node: a push must be signed for this node's
  origin; a pull or a member list may also be signed for anyone (``*``);
  ``clock_skew`` when the proof is good but its time is past
  ``max_clock_skew`` from ours: that answer carries our clock (``clock``,
  unix seconds) in its body and is signed for the request, so the sender
  can trust what it measures from it (:mod:`forum.replication.clocks`);
* 400 for a body that is not a well-formed message, or holds forged entries
  (entries of this node's own origin that it never wrote, seqs absurdly far
  ahead) — then nothing of it is applied;
* 400 for an ``X-Forum-Clock`` that is not a unix time (:mod:`forum.replication.clocks`);
* 409 when the sender is this very node (a seed URL that leads back here);
* 503 while replication is not running (starting or shutting down).

Answers are msgpack, signed when there is a cluster key, and carry this
node's clock; errors are the node's JSON error bodies. A push or a pull is a
sample of its sender's clock offset once it is accepted.

:func:`serve` answers a request whatever carried it: the aiohttp routes here,
or :class:`~forum.replication.memory.MemoryTransport` (peers in one process, no
sockets), so both take the same checks and give the same answers.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from aiohttp import web

from forum.node.http.bodies import ApiProblem
from forum.replication.auth import ClusterAuth
from forum.replication.clocks import read_stamp, stamp
from forum.replication.errors import BadMessage, BadSignature, ClockSkewed
from forum.replication.messages import (
    LEND_PATH,
    LENT_PATH,
    MEMBERS_PATH,
    PULL_PATH,
    PUSH_PATH,
    LendRequest,
    LentNotice,
    Member,
    Message,
    decode_lend,
    decode_lent,
    decode_pull,
    decode_push,
    encode,
    read_digest,
)
from forum.replication.replicator import Replicator
from forum.replication.transport import MSGPACK


@dataclass(frozen=True, slots=True)
class Replication:
    """What the routes need while replication runs (in the app under :data:`REPLICATION`)."""

    replicator: Replicator
    auth: ClusterAuth


REPLICATION = web.AppKey("replication", Replication)


@dataclass(frozen=True, slots=True)
class Request:
    """One replication request, as it came: ``headers`` hold its signature."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    #: Our clock when it came in (for the sample of the sender's clock).
    received: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class Answer:
    """The msgpack body of an answer, and its (signature) headers."""

    body: bytes
    headers: Mapping[str, str]


_Serve = Callable[[Replication, Request], Awaitable[Answer]]
#: A message a peer sends (it names its sender).
_Sent = TypeVar("_Sent", LendRequest, LentNotice)


def add_routes(app: web.Application) -> None:
    app.router.add_post(PUSH_PATH, _route)
    app.router.add_post(PULL_PATH, _route)
    app.router.add_get(MEMBERS_PATH, _route)
    app.router.add_post(LEND_PATH, _route)
    app.router.add_post(LENT_PATH, _route)


async def _route(request: web.Request) -> web.Response:
    received = time.time()  # before the body: the sender stamped its clock before sending it
    body = await request.read()
    asked = Request(request.method, request.path, request.headers, body, received)
    answer = await serve(request.app.get(REPLICATION), asked)
    return web.Response(body=answer.body, content_type=MSGPACK, headers=answer.headers)


async def serve(replication: Replication | None, request: Request) -> Answer:
    """Answer ``request`` with the running ``replication`` (``None``: not running).
    ``ApiProblem`` (the status and JSON error body) when it is refused."""
    route = _ROUTES.get(request.path)
    if route is None:
        raise ApiProblem(404, "not_found", f"no replication route {request.path}")
    method, answer = route
    allowed = {method, "HEAD"} if method == "GET" else {method}  # as aiohttp's add_get
    if request.method not in allowed:
        raise ApiProblem(405, "method_not_allowed", f"{request.path} takes {method}")
    if replication is None:
        raise ApiProblem(
            503, "unavailable", "replication is not running", headers={"Retry-After": "1"}
        )
    return await answer(replication, request)


async def _push(replication: Replication, request: Request) -> Answer:
    signature = _accept(replication, request, anyone=False)
    replicator = replication.replicator
    try:
        clock = read_stamp(request.headers)
        message = decode_push(request.body)
        _not_self(replicator, message.sender)
        ack = await replicator.receive_push(message, len(request.body))
    except BadMessage as exc:
        raise _refuse(replicator, 400, "bad_message", str(exc)) from None
    _sample(replicator, message.sender, clock, request)
    return _answer(
        replication, signature=signature, to=message.sender, kind="push_ack", message=ack, entries=0
    )


async def _pull(replication: Replication, request: Request) -> Answer:
    signature = _accept(replication, request, anyone=True)
    replicator = replication.replicator
    try:
        clock = read_stamp(request.headers)
        message = decode_pull(request.body)
        digest = read_digest(request.headers)
        if digest is not None:
            message = dataclasses.replace(message, digest=digest)
    except BadMessage as exc:
        raise _refuse(replicator, 400, "bad_message", str(exc)) from None
    _not_self(replicator, message.sender)
    replicator.note_received_pull(message.sender, len(request.body))
    page = await replicator.serve_pull(message)
    _sample(replicator, message.sender, clock, request)
    return _answer(
        replication,
        signature=signature,
        to=message.sender,
        kind="page",
        message=page,
        entries=len(page.entries),
    )


async def _members(replication: Replication, request: Request) -> Answer:
    signature = _accept(replication, request, anyone=True)
    body = encode(replication.replicator.member_list())
    return Answer(body, replication.auth.sign_response(signature, body) | stamp(time.time()))


async def _lend(replication: Replication, request: Request) -> Answer:
    signature, clock, message = _accepted(replication, request, decode_lend)
    loan = replication.replicator.serve_lend(message)
    _sample(replication.replicator, message.sender, clock, request)
    return _answer(
        replication,
        signature=signature,
        to=message.sender,
        kind="loan",
        message=loan,
        entries=len(loan.entries),
    )


async def _lent(replication: Replication, request: Request) -> Answer:
    signature, clock, message = _accepted(replication, request, decode_lent)
    members = replication.replicator.receive_lent(message)
    _sample(replication.replicator, message.sender, clock, request)
    return _answer(
        replication,
        signature=signature,
        to=message.sender,
        kind="members",
        message=members,
        entries=0,
    )


def _accepted(
    replication: Replication, request: Request, decode: Callable[[bytes], _Sent]
) -> tuple[str, float | None, _Sent]:
    """A request signed for this node: its signature, the sender's clock
    stamp and its message, checked (a 400 if malformed, 409 if from us)."""
    signature = _accept(replication, request, anyone=False)
    replicator = replication.replicator
    try:
        clock = read_stamp(request.headers)
        message = decode(request.body)
    except BadMessage as exc:
        raise _refuse(replicator, 400, "bad_message", str(exc)) from None
    _not_self(replicator, message.sender)
    return signature, clock, message


_ROUTES: dict[str, tuple[str, _Serve]] = {
    PUSH_PATH: ("POST", _push),
    PULL_PATH: ("POST", _pull),
    MEMBERS_PATH: ("GET", _members),
    LEND_PATH: ("POST", _lend),
    LENT_PATH: ("POST", _lent),
}


def _accept(replication: Replication, request: Request, *, anyone: bool) -> str:
    """The request's checked signature.

    ``anyone``: the request may be signed for any node (``*``), not only for
    this one: only the read-only routes allow it, since a sender learns a
    peer's origin from its first answer, and a read replayed to another node
    changes nothing there that matters.
    """
    try:
        return replication.auth.verify_request(
            request.method,
            request.path,
            request.headers,
            request.body,
            me=replication.replicator.me.origin,
            anyone=anyone,
        )
    except ClockSkewed as exc:
        replication.replicator.note_refused("clock_skew")
        problem = ApiProblem(401, "clock_skew", str(exc), details={"clock": round(time.time(), 3)})
        problem.headers.update(
            replication.auth.sign_response(exc.signature, (problem.text or "").encode())
        )
        raise problem from None
    except BadSignature as exc:
        raise _refuse(replication.replicator, 401, "unauthorized", str(exc)) from None


def _sample(replicator: Replicator, sender: Member, clock: float | None, request: Request) -> None:
    """The sender's clock offset, as its request shows it (after it was
    served, so that a sender learned from it is in the table)."""
    if clock is not None:
        replicator.note_clock(sender, clock - request.received)


def _not_self(replicator: Replicator, sender: Member) -> None:
    if sender.origin == replicator.me.origin:
        raise _refuse(replicator, 409, "self", "this request comes from this very node")


def _refuse(replicator: Replicator, status: int, code: str, message: str) -> ApiProblem:
    replicator.note_refused(code)
    return ApiProblem(status, code, message)


def _answer(
    replication: Replication,
    *,
    signature: str,
    to: Member,
    kind: str,
    message: Message,
    entries: int,
) -> Answer:
    body = encode(message)
    replication.replicator.note_sent(to, kind, entries, len(body))
    return Answer(body, replication.auth.sign_response(signature, body) | stamp(time.time()))
