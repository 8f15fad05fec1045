"""The chaos runs' summary, printed at the end of the session (pytest
captures what passing tests print)."""

from __future__ import annotations

from pytest import TerminalReporter

from tests.chaos.harness import REPORT


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    if REPORT:
        terminalreporter.section("chaos runs: history checks")
        for line in REPORT:
            terminalreporter.write_line(line)
