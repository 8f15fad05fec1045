"""A benchmark's report: its JSON file, with the machine it ran on."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any


def write_report(out: Path, report: dict[str, Any]) -> None:
    """``report``, and the machine it was measured on, as JSON in ``out``."""
    machine = {"python": platform.python_version(), "platform": platform.platform()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**report, "machine": machine}, indent=2) + "\n")
    print(f"written to {out}")
