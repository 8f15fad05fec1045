"""Each chaos run's summary line (tests.chaos.harness.REPORT) rides on its
test's report (``user_properties``, "chaos run"), so that the session's
end can print them all: pytest captures what passing tests print, and under
pytest-xdist the runs happen in worker processes, whose REPORT the
controller never sees. tests/conftest.py collects and prints them."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.chaos.harness import REPORT

_sent = 0  # how many of REPORT's lines went out on a report already


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    global _sent
    report = yield
    if call.when == "call" and len(REPORT) > _sent:
        result = report.get_result()  # type: ignore[attr-defined]
        result.user_properties = [
            *result.user_properties,
            *(("chaos run", line) for line in REPORT[_sent:]),
        ]
        _sent = len(REPORT)
