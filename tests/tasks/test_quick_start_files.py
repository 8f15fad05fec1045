"""The quick start leaves the checkout as it was, and says where ``forum``
is: issue 31's rough edges, tested part by part (the whole of ``scripts/demo``
installs tools first: too slow for a test). The parts: the demo's cluster
writes only under its temporary root, the script's last lines name
``.venv/bin/forum``, the example's database is not in the working
directory, and the documented ``redis-server`` writes into a directory of
its own (``--dir``), not the checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from examples.thumbnails.app import database
from forum.tasks import JobState
from tests.coordinator.harness import REPO
from tests.fixtures.cli import run_forum


def test_the_demo_script_says_where_forum_is_and_keeps_the_demos_exit_code(
    tmp_path: Path,
) -> None:
    """``forum`` is not on PATH after ``bash scripts/demo``: its last lines
    say how to run it. The set-up and the demo are stand-ins here."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "demo", tmp_path / "scripts" / "demo")
    (tmp_path / "scripts" / "install-tools").write_text("true\n")
    stand_in = tmp_path / ".venv" / "bin" / "forum"
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text('#!/bin/sh\necho "demo $*"\nexit 3\n')
    stand_in.chmod(0o755)
    ran = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "demo"), "--jobs", "5"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 3 and ran.stdout == "demo cluster demo --jobs 5\n"
    said = ran.stderr.strip().splitlines()[-2:]
    assert ".venv/bin/forum" in said[0] and "source .venv/bin/activate" in said[1]


@pytest.mark.slow
async def test_the_demo_writes_nothing_where_it_runs(tmp_path: Path) -> None:
    """``scripts/demo`` runs ``forum cluster demo`` in the checkout: its
    nodes, Redis (``appendonlydir/``, ``dump.rdb``) and logs go to a
    temporary directory, never the working directory."""
    here = tmp_path / "checkout"
    here.mkdir()
    code, out, err = await run_forum(
        "cluster", "demo", "--nodes", "1", "--workers", "1", "--jobs", "20", "--deadline", "40",
        cwd=here,
    )  # fmt: skip
    assert code == 0, out + err[-3000:]
    assert "OK: attempted=20" in out
    assert sorted(os.listdir(here)) == []


def test_the_examples_database_is_not_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("THUMBNAILS_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert Path(database()) == Path(tempfile.gettempdir()) / "forum-thumbnails.db"
    monkeypatch.setenv("THUMBNAILS_DB", str(tmp_path / "mine.db"))
    assert database() == str(tmp_path / "mine.db")


@pytest.mark.parametrize("doc", ["README.md", "docs/tasks.md", "examples/thumbnails/__init__.py"])
def test_the_documented_redis_writes_into_a_directory_of_its_own(doc: str) -> None:
    """``redis-server`` writes ``appendonlydir/`` and ``dump.rdb`` where it
    runs (the checkout, in the quick start) unless given ``--dir``."""
    commands = re.findall(r"^\s*redis-server .*$", (REPO / doc).read_text(), re.MULTILINE)
    assert commands
    for command in commands:
        assert '--dir "$(mktemp -d)"' in command, command


def test_the_docs_show_what_printing_a_state_prints() -> None:
    """The quick start said ``print(status.state)`` shows ``JobState.DONE``;
    a JobState is a str, and prints its value."""
    assert str(JobState.DONE) == "done" and f"{JobState.DONE}" == "done"
    for doc in ("README.md", "docs/tasks.md"):
        printed = [
            line
            for line in (REPO / doc).read_text().splitlines()
            if "print(" in line and ".state)" in line
        ]
        for line in printed:
            assert "# JobState." not in line, line
    assert any("# done" in line for line in (REPO / "docs/tasks.md").read_text().splitlines())
