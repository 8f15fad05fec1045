"""One import name: installing Forum makes ``forum`` importable and nothing
else, so a user's files named like Forum's parts (a Celery user's first file
is ``tasks.py``) shadow nothing of ours, and ours shadow nothing of theirs.
The mechanism is in docs/layout.md."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.nodes import NodeProcess

REPO = Path(__file__).resolve().parents[1]
FORUM = Path(sys.executable).with_name("forum")

#: A user's project: an app in ``tasks.py``, and modules named like each of
#: Forum's parts, each saying whose it is.
USER_FILES = {
    "tasks.py": """
        import os

        from forum import App, Context

        WHO = "the user"
        app = App(nodes=os.environ.get("USER_NODE", "http://127.0.0.1:1"),
                  redis=os.environ.get("USER_REDIS", "redis://127.0.0.1:1/0"),
                  prefix=b"user/")


        @app.task
        async def add(ctx: Context, a: int, b: int) -> int:
            return a + b
    """,
    **{
        f"{name}.py": 'WHO = "the user"\n'
        for name in ("node", "deploy", "dashboard", "coordinator", "replication")
    },
}
SHADOWED = ("tasks", "node", "deploy", "dashboard", "coordinator", "replication")
#: The folders that each hold one part of the namespace.
PARTS = ("node", "replication", "coordinator", "tasks", "dashboard", "deploy")


def user_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in USER_FILES.items():
        (root / name).write_text(textwrap.dedent(text))
    return root


def test_a_users_modules_named_like_forums_parts_import_beside_forum(tmp_path: Path) -> None:
    project = user_project(tmp_path / "project")
    code = f"""
import {", ".join(SHADOWED)}, forum
from forum import App
from forum.tasks import App as TaskApp
assert App is TaskApp
for module in ({", ".join(SHADOWED)}):
    assert module.WHO == "the user", module
    assert module.__file__.startswith({str(project)!r}), module.__file__
assert isinstance(tasks.app, App) and "add" in tasks.app.tasks
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.slow
async def test_forum_worker_runs_the_app_in_a_users_tasks_py(
    tmp_path: Path, forum_node: NodeProcess, redis_url: str
) -> None:
    """``forum worker --app tasks:app`` beside the user's files runs their
    task (it said "a module, not a task app": ``tasks`` was Forum's)."""
    project = user_project(tmp_path / "project")
    env = {**os.environ, "USER_NODE": forum_node.url, "USER_REDIS": redis_url}
    worker = await asyncio.create_subprocess_exec(
        str(FORUM), "worker", "--app", "tasks:app", "--no-progress", "--take-wait", "0.2",
        cwd=project, env=env, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        spec = importlib.util.spec_from_file_location("users_tasks", project / "tasks.py")
        assert spec is not None and spec.loader is not None
        users_tasks = importlib.util.module_from_spec(spec)
        os.environ["USER_NODE"], os.environ["USER_REDIS"] = forum_node.url, redis_url
        try:
            spec.loader.exec_module(users_tasks)
        finally:
            del os.environ["USER_NODE"], os.environ["USER_REDIS"]
        async with users_tasks.app:
            job = await users_tasks.add.enqueue(2, 3)
            assert await job.result(timeout=30) == 5
    finally:
        if worker.returncode is None:
            worker.terminate()
        _, err = await asyncio.wait_for(worker.communicate(), 30)
    assert b"Traceback" not in err, err.decode()


def test_pyproject_lists_every_package_of_the_tree() -> None:
    """setuptools is told each package (a ``find`` over several folders cannot
    map them under one name): the list and the tree are the same."""
    with open(REPO / "pyproject.toml", "rb") as f:
        setuptools = tomllib.load(f)["tool"]["setuptools"]
    folders = setuptools["package-dir"]
    found = set()
    for name, folder in folders.items():
        for init in (REPO / folder).rglob("__init__.py"):
            below = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((name, *below)))
    assert sorted(found) == setuptools["packages"]


@pytest.mark.slow
def test_the_wheel_holds_forum_and_nothing_else(tmp_path: Path) -> None:
    """What an install puts on the path: ``forum`` and its metadata, no
    ``node``, ``tasks``... and none of the tests' or benches' helpers; every
    module, Lua script and template of the tree is in it."""
    # Built from a copy: setuptools leaves build/ and *.egg-info where it builds.
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for folder in ("forum", *PARTS):
        shutil.copytree(REPO / folder, source / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("forum-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    top = {name.split("/", 1)[0] for name in names}
    assert {name for name in top if not name.endswith(".dist-info")} == {"forum"}
    expected = {f"forum/{p.relative_to(REPO / 'forum')}" for p in (REPO / "forum").glob("*.py")}
    for part in PARTS:
        home = REPO / part / "forum" / part
        shipped = [
            p for p in home.rglob("*") if p.suffix in (".py", ".lua", ".html", ".js", ".css")
        ]
        expected |= {f"forum/{part}/{p.relative_to(home)}" for p in shipped}
    assert expected - names == set()
