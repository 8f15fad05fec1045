"""The app key of the dashboard's Lens, apart from the modules that use it:
:mod:`forum.dashboard.pages` must not import the task layer (and with it Redis's
client) on a node-only install, so it imports :mod:`forum.dashboard.jobs` only
when ``--lens-url`` is given."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from forum.dashboard.lensview import LensView

#: The Lens the dashboard was given (``--lens-url``); absent without one.
LENS_VIEW: web.AppKey[LensView] = web.AppKey("dashboard_lens")


def lens_view(request: web.Request) -> LensView | None:
    """The Lens the dashboard was given, if any."""
    return request.app.get(LENS_VIEW)
