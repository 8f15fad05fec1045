"""``forum --version`` says the installed version, as ``/v1/status`` does."""

from __future__ import annotations

import pytest

import forum
from forum.cli import main
from forum.coordinator.job import GiveUp, RetryAfter
from forum.node.core.version import installed_version


def test_forum_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"forum {installed_version()}"
    assert installed_version() != "0+unknown"  # installed: the project's version


def test_retry_after_and_give_up_are_forums_names() -> None:
    assert forum.RetryAfter is RetryAfter and forum.GiveUp is GiveUp
