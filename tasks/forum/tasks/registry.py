"""The apps that run in a Lens's namespace, as their workers announce them.

Several :class:`~forum.tasks.App` s may share one cluster and one Lens, each
under its own prefix (``nu/``, ``task/``). Whoever shows their jobs (the
dashboard, ``forum serve --lens-url``) must know which exist and where their
jobs are: each app worker writes its app's prefix, dead prefix and tasks
(with their queues) when it starts, one field of one hash:

==========================  ======  ========================================  =======
key                         type    holds                                     expires
==========================  ======  ========================================  =======
``{<ns>:0}:apps``           hash    field: an app's prefix (bytes); value:    never
                                    msgpack ``{dead_prefix, tasks: {name:
                                    queue}, seen}`` (``seen``: the last
                                    worker start, Unix s)
==========================  ======  ========================================  =======

One field per app, rewritten at each worker start (its tasks as the
starting worker has them), read whole with one ``HGETALL``: no scan. It
never expires, so an app whose workers stopped is still listed, with when
one last started: its jobs are still there to look at. The announcement is
best effort: a worker whose Lens does not answer yet still starts (it waits
for the Lens as it would anyway), and says so in its log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack
from redis import exceptions as redis_errors

from forum.coordinator import LensUnavailable
from forum.coordinator.keys import KeySchema
from forum.coordinator.lens import LensConfig
from forum.coordinator.presence import client_for
from forum.coordinator.redis_url import close
from forum.tasks.queues import DEFAULT_QUEUE
from forum.tasks.task import TaskOptions

if TYPE_CHECKING:
    from forum.tasks.app import App

__all__ = ["KnownApp", "announce", "apps_key", "known_apps"]

log = logging.getLogger(__name__)


def apps_key(config: LensConfig) -> str:
    """The registry's hash, in shard 0 (one key: a Cluster slot of its own)."""
    return f"{KeySchema(config.namespace, config.shards).tag(0)}:apps"


@dataclass(frozen=True, slots=True)
class KnownApp:
    """One app of the registry: its ``prefix`` and ``dead_prefix``, its
    ``tasks`` (name -> queue) and when a worker of it last started."""

    prefix: bytes
    dead_prefix: bytes
    tasks: Mapping[str, str]
    seen: float

    @property
    def name(self) -> str:
        """The prefix as text (how a page names and selects the app)."""
        return self.prefix.decode(errors="replace")

    @property
    def queues(self) -> list[str]:
        return sorted({DEFAULT_QUEUE, *self.tasks.values()})

    def inspector(self, nodes: str, redis: str, *, token: str | None, namespace: str) -> App:
        """An :class:`App` of this prefix for looking at and acting on its
        jobs (status, retry, cancel, purge), not for running them: its tasks
        are stand-ins in their queues, so a status looks for a job's tuple
        and dead letter in each queue the app's workers serve."""
        from forum.tasks.app import App  # noqa: PLC0415  (app imports this module)

        app = App(nodes, redis, prefix=self.prefix, dead_prefix=self.dead_prefix, token=token,
                  namespace=namespace)  # fmt: skip
        for name, queue in sorted(self.tasks.items()):
            app.add_task(name, _not_here, TaskOptions(queue=queue))
        return app


def _not_here(*args: Any, **kwargs: Any) -> None:
    """A stand-in task: an inspector's worker would be a mistake."""
    raise RuntimeError("an inspector app runs no task: the app's own workers do")


async def announce(app: App, config: LensConfig) -> None:
    """Write ``app``'s field of the registry (best effort: a warning when
    the Lens does not answer)."""
    value = {
        "dead_prefix": app.dead_prefix,
        "tasks": {name: task.options.queue or DEFAULT_QUEUE for name, task in app.tasks.items()},
        "seen": time.time(),
    }
    redis = client_for(config)
    try:
        await redis.hset(apps_key(config), app.prefix, msgpack.packb(value))
    except (redis_errors.RedisError, OSError) as exc:
        log.warning("could not announce app %r in the Lens's registry: %s", app.prefix, exc)
    finally:
        await close(redis)


async def known_apps(config: LensConfig) -> list[KnownApp]:
    """Every app announced in ``config``'s namespace, by prefix;
    :class:`LensUnavailable` when Redis does not answer."""
    redis = client_for(config)
    try:
        found = await redis.hgetall(apps_key(config))
    except (redis_errors.RedisError, OSError) as exc:
        raise LensUnavailable(f"cannot read the apps' registry: {exc}") from exc
    finally:
        await close(redis)
    apps = []
    for prefix, raw in found.items():
        if not isinstance(prefix, bytes):  # the client does not decode: never
            continue
        try:
            value = msgpack.unpackb(raw)
            apps.append(KnownApp(prefix, bytes(value["dead_prefix"]),
                                 {str(k): str(v) for k, v in value["tasks"].items()},
                                 float(value["seen"])))  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):  # a newer writer's: skipped
            continue
    return sorted(apps, key=lambda a: a.prefix)
