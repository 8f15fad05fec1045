"""The installed distribution's version: what ``/v1/status`` and ``forum --version`` say."""

from __future__ import annotations

from importlib import metadata


def installed_version() -> str:
    """``forum``'s version as installed (``0+unknown`` from a bare checkout)."""
    try:
        return metadata.version("forum")
    except metadata.PackageNotFoundError:
        return "0+unknown"
