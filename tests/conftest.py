"""Fixtures shared by every test package: real servers, started on free ports;
and the chaos runs' summary, printed at the end of the session."""

from __future__ import annotations

import pytest
from pytest import TerminalReporter

pytest_plugins = [
    "tests.fixtures.ports",  # first: the others import it
    "tests.fixtures.nodes",
    "tests.fixtures.redis_server",
    "tests.fixtures.tmpfs",
    "tests.fixtures.toxiproxy",
]

#: The lines tests/chaos/conftest.py put on the chaos tests' reports, as they
#: arrive here (from this process or from a pytest-xdist worker).
_chaos_runs: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _chaos_runs.extend(str(v) for k, v in report.user_properties if k == "chaos run")


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    if _chaos_runs:
        terminalreporter.section("chaos runs: history checks")
        for line in _chaos_runs:
            terminalreporter.write_line(line)
