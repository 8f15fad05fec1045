"""The web dashboard every ``forum serve`` serves at ``/ui`` (docs/dashboard.md).

A face of the node like the CLI, so a package of its own above ``forum.node``:
it reads the node's parts through the app's typed keys and the same
functions the API's routes call, and never the other way round (``forum.node``
knows nothing of it; ``forum serve`` mounts it, see
:func:`forum.cli_serve.node_extensions`). It may read ``forum.replication`` too,
but needs nothing of it beyond the status rows replication fills.
"""

from __future__ import annotations

from forum.dashboard.pages import ROOT, dashboard
from forum.dashboard.sampler import Sampler

__all__ = ["ROOT", "Sampler", "dashboard"]
