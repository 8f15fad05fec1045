"""The task layer's spans, when tracing is on (:mod:`forum.node.core.tracing`).

One trace follows a job from its enqueue through each attempt::

    forum.enqueue <task>   PRODUCER  App.enqueue: the job's tuple written; its
                                     context rides in the job (options["trace"])
      forum.run <task>     CONSUMER  one per attempt, on the worker that claimed it:
                                     event forum.claimed (the fencing token), the
                                     task, its outcome recorded; a chain's next
                                     step is enqueued inside it (its child)

``forum.enqueue_many`` (PRODUCER) is one span for a batch, each job's run its
child. The attributes follow OpenTelemetry's messaging semantic conventions
(``messaging.system`` ``forum``, ``messaging.operation.type`` ``send`` /
``process``, ``messaging.destination.name`` the queue,
``messaging.message.id`` the job key), and Forum's own say the task, the
attempt, the worker and the outcome (docs/tracing.md).

The claim's completion is not a span of its own: the worker completes the
claims of many jobs in one Lens call after their handlers return
(:mod:`forum.coordinator.completions`); ``forum.job.outcome`` ``done`` on
the run span is the job handed over to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from forum.coordinator import ClaimLost, GiveUp, Job, RetryAfter
from forum.node.core.tracing import SCOPE, parent_of
from forum.tasks.message import Message

#: Where a job carries its producer's span context, in its message's options.
TRACE_OPTION = "trace"


def enqueue_span(tracer: Tracer, task: str) -> AbstractContextManager[Span]:
    """``forum.enqueue <task>``, current while the job is prepared (so its
    context goes into the job) and written; :func:`sent` names the job."""
    return _sending(tracer, f"forum.enqueue {task}", "enqueue", {"forum.task": task})


def sent(span: Span, key: str, queue: str) -> None:
    """What an enqueue's span learns once its job is prepared: its key and queue."""
    span.set_attribute("messaging.message.id", key)
    span.set_attribute("messaging.destination.name", queue)


def enqueue_many_span(tracer: Tracer, count: int) -> AbstractContextManager[Span]:
    """``forum.enqueue_many``: one span for a batch of jobs (each carries it)."""
    return _sending(
        tracer, "forum.enqueue_many", "enqueue_many", {"messaging.batch.message_count": count}
    )


def _sending(
    tracer: Tracer, name: str, operation: str, more: dict[str, str | int]
) -> AbstractContextManager[Span]:
    """A PRODUCER span, current while it lasts."""
    attributes: dict[str, str | int] = {
        "messaging.system": SCOPE,
        "messaging.operation.type": "send",
        "messaging.operation.name": operation,
        **more,
    }
    return tracer.start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=attributes)


@contextmanager
def run_span(tracer: Tracer, job: Job, message: Message) -> Iterator[Span]:
    """``forum.run <task>``, one attempt of ``job``: a child of the span that
    enqueued it (carried in the job), its outcome from how the attempt ends."""
    carried: Any = message.options.get(TRACE_OPTION)  # a mapping, as decoding checked
    fields = (
        {k: v for k, v in carried.items() if isinstance(k, str) and isinstance(v, str)}
        if carried
        else None
    )  # anything else a producer put there is no context: a root span
    with tracer.start_as_current_span(
        f"forum.run {message.task}",
        context=parent_of(fields),
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": SCOPE,
            "messaging.operation.type": "process",
            "messaging.operation.name": "run",
            "messaging.destination.name": message.queue,
            "messaging.message.id": message.key,
            "forum.task": message.task,
            "forum.job.attempt": job.attempt,
            "forum.worker": job.claim.owner,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        span.add_event("forum.claimed", {"forum.claim.token": job.token})
        outcome = "failed"
        try:
            yield span
            outcome = "done"
        except RetryAfter as exc:
            outcome = "retrying"
            _failed(span, exc, exc.error)
            raise
        except GiveUp as exc:
            outcome = "dead"
            _failed(span, exc, exc.error.splitlines()[-1] if exc.error else "gave up")
            raise
        except ClaimLost:
            outcome = "lost"  # another holder has the job: not this attempt's failure
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as exc:
            _failed(span, exc, f"{type(exc).__name__}: {exc}")
            raise
        finally:
            span.set_attribute("forum.job.outcome", outcome)


def _failed(span: Span, exc: BaseException, why: str) -> None:
    """Mark ``span`` failed: the task's own exception (what the outcome was raised from)."""
    span.record_exception(exc.__cause__ or exc)
    span.set_status(Status(StatusCode.ERROR, why))
