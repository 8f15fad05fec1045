"""Limits kept in the Lens's Redis (forum.coordinator.limits):
:class:`LensLimits` is the part of :class:`forum.coordinator.lens.Lens` that
admits jobs under them (``lua/admit.lua``) and extends and ends their
admissions (``lua/admitted.lua``). Each ask is one script in the shard of
its group (forum.coordinator.keys, :meth:`KeySchema.limit`), so all of one
job's limits are admitted at once or none; a batch of asks is one pipeline."""

from __future__ import annotations

from collections.abc import Sequence

from forum.coordinator.connection import LensConnection
from forum.coordinator.limits import Ask
from forum.coordinator.scripts import Call, ms


def _bounds(ask: Ask, *, running_only: bool) -> list[tuple[str, str]]:
    """The bounds of ``ask``'s limits, in a fixed order: ``(bound key name,
    ARGV word)`` as admit.lua takes them."""
    bounds = []
    for limit in ask.limits:
        if limit.running is not None:
            bounds.append((f"running:{limit.name}", f"r{limit.running}"))
        if limit.rate is not None and not running_only:
            bounds.append((f"rate:{limit.name}", f"t{max(1, round(1_000_000 / limit.rate))}"))
    return bounds


class LensLimits(LensConnection):
    """Admissions under limits, in the Lens's Redis (see the module docstring)."""

    async def admit_many(self, asks: Sequence[Ask], lease: float) -> list[tuple[float, bool]]:
        """:meth:`forum.coordinator.limits.Limiter.admit_many`: a script an ask, one round trip."""
        if not asks:
            return []
        calls = []
        for ask in asks:
            bounds = _bounds(ask, running_only=False)
            calls.append(Call(
                "admit", self._keys.limit_shard(ask.group), None,
                (ask.member, ms(lease), " ".join(word for _, word in bounds)),
                keys=tuple(name for name, _ in bounds),
            ))  # fmt: skip
        replies = await self._send(calls)
        return [(int(wait) / 1000, bool(int(exact))) for wait, exact in replies]

    async def extend_admitted(self, asks: Sequence[Ask], lease: float) -> list[bool]:
        """:meth:`forum.coordinator.limits.Limiter.extend_admitted`, in one round trip."""
        return [bool(int(reply)) for reply in await self._admitted(asks, ms(lease))]

    async def release_admitted(self, asks: Sequence[Ask]) -> None:
        """:meth:`forum.coordinator.limits.Limiter.release_admitted`, in one round trip."""
        await self._admitted(asks, 0)

    async def _admitted(self, asks: Sequence[Ask], lease_ms: int) -> list[int]:
        calls = []
        for ask in asks:
            bounds = _bounds(ask, running_only=True)
            calls.append(Call(
                "admitted", self._keys.limit_shard(ask.group), None, (ask.member, lease_ms),
                keys=tuple(name for name, _ in bounds),
            ))  # fmt: skip
        return list(await self._send(calls)) if calls else []
