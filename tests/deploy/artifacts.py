"""The deploy/ artifacts, read the way their tools read them, for the deploy tests.

The Dockerfile is parsed by BuildKit's own parser (the ``dockerfile``
package), the compose file and the Kubernetes manifests by PyYAML (merge keys
included, as compose resolves them). On top of that, :class:`Launch` is one
``forum`` process as a manifest would start it: the image's ENTRYPOINT/CMD
and ENV, overridden by the manifest's command and environment, with compose
interpolation and Kubernetes ``$(VAR)`` expansion applied. The tests then
hand each launch's argv to the real ``forum`` parser and its options to the
real :class:`NodeConfig`, so a drift between a manifest and the CLI fails.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dockerfile
import yaml

from forum.cli import build_parser
from forum.cli_serve import serve_flags
from forum.node.config.node import NodeConfig

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "docker-compose.yml"
K8S = DEPLOY / "k8s"
KUSTOMIZATION = K8S / "kustomization.yaml"
K8S_GROUPS = K8S / "groups"
CONFIGS = DEPLOY / "configs"
OPERATIONS = REPO / "docs" / "operations.md"

#: What the tests put in for the variables the compose file requires.
COMPOSE_TEST_ENV = {"FORUM_CLUSTER_SECRET": "compose-test-secret"}


# -- the Dockerfile ----------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """One ``FROM ... AS name`` stage and its instructions."""

    name: str
    base: str
    commands: tuple[dockerfile.Command, ...]

    def all(self, cmd: str) -> list[dockerfile.Command]:
        return [c for c in self.commands if c.cmd == cmd]


@dataclass(frozen=True)
class Image:
    """What a build target's image holds that a manifest relies on."""

    target: str
    env: Mapping[str, str]
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    user: str | None
    exposed: tuple[str, ...]
    volumes: tuple[str, ...]
    healthcheck: tuple[str, ...] | None


class Dockerfile:
    """The stages of deploy/Dockerfile and the image each target builds."""

    def __init__(self, path: Path = DOCKERFILE) -> None:
        self.path = path
        self.commands = dockerfile.parse_file(str(path))
        stages: list[Stage] = []
        for command in self.commands:
            if command.cmd == "FROM":
                base, *rest = command.value
                if [word.upper() for word in rest[:1]] != ["AS"] or len(rest) != 2:
                    raise ValueError(f"{command.original!r}: every stage must be named")
                stages.append(Stage(rest[1], base, ()))
            elif not stages:
                if command.cmd != "ARG":
                    raise ValueError(f"{command.original!r} before the first FROM")
            else:
                last = stages[-1]
                stages[-1] = dataclasses.replace(last, commands=(*last.commands, command))
        self.stages = {stage.name: stage for stage in stages}
        self.default_target = stages[-1].name

    def chain(self, target: str) -> list[Stage]:
        """The stages an image of ``target`` is made of, outermost base first."""
        chain = [self.stages[target]]
        while chain[-1].base in self.stages:
            chain.append(self.stages[chain[-1].base])
        return chain[::-1]

    def image(self, target: str | None = None) -> Image:
        target = target or self.default_target
        env: dict[str, str] = {}
        entrypoint: tuple[str, ...] = ()
        cmd: tuple[str, ...] = ()
        user = None
        exposed: list[str] = []
        volumes: list[str] = []
        healthcheck = None
        for stage in self.chain(target):
            for command in stage.commands:
                match command.cmd:
                    case "ENV":
                        pairs = command.value
                        env.update(zip(pairs[::2], pairs[1::2], strict=True))
                    case "ENTRYPOINT":
                        entrypoint = _exec_form(command)
                        cmd = ()  # Docker resets CMD when ENTRYPOINT is set
                    case "CMD":
                        cmd = _exec_form(command)
                    case "USER":
                        user = command.value[0]
                    case "EXPOSE":
                        exposed += command.value
                    case "VOLUME":
                        volumes += command.value
                    case "HEALTHCHECK":
                        healthcheck = _exec_form(command)
        return Image(
            target, env, entrypoint, cmd, user, tuple(exposed), tuple(volumes), healthcheck
        )


def _exec_form(command: dockerfile.Command) -> tuple[str, ...]:
    # Shell form would run `/bin/sh -c`, which turns SIGTERM away from forum.
    if command.cmd != "HEALTHCHECK" and not command.json:
        raise ValueError(f"{command.original!r}: use the exec (JSON) form")
    return tuple(command.value)


# -- compose -----------------------------------------------------------------------

_INTERPOLATION = re.compile(
    r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:[?-])(?P<arg>[^}]*))?\}"
)


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}``; others refused."""

    def replace(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        value = env.get(name) or None
        if value is not None:
            return value
        if op == ":-":
            return str(arg)
        raise KeyError(f"${{{name}}} is not set" + (f": {arg}" if op == ":?" else ""))

    result = _INTERPOLATION.sub(replace, text)
    if "$" in result.replace("$$", ""):
        raise ValueError(f"{text!r}: interpolation this test does not understand")
    return result.replace("$$", "$")


def load_compose(path: Path = COMPOSE) -> dict[str, Any]:
    with open(path) as f:
        document: dict[str, Any] = yaml.safe_load(f)
    return document


def compose_environment(service: Mapping[str, Any]) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    return {k: interpolate(str(v), COMPOSE_TEST_ENV) for k, v in raw.items()}


# -- Kubernetes ----------------------------------------------------------------------


def k8s_files() -> list[Path]:
    """The manifests (the kustomization is kustomize's file, not an object)."""
    return sorted(p for p in K8S.glob("*.yaml") if p != KUSTOMIZATION)


def k8s_group_files() -> list[Path]:
    """The replica groups' manifests (deploy/k8s/groups/, its own kustomization)."""
    return sorted(p for p in K8S_GROUPS.glob("*.yaml") if p.name != KUSTOMIZATION.name)


def load_k8s(paths: Sequence[Path] | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """The documents of ``paths`` (default: the single-group manifests)."""
    documents = []
    for path in k8s_files() if paths is None else paths:
        with open(path) as f:
            documents += [(path, doc) for doc in yaml.safe_load_all(f) if doc is not None]
    return documents


_K8S_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def k8s_expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` in command, args and env values; unknown ones are an error
    (Kubernetes would leave them as they are, which is never what was meant)."""

    def replace(match: re.Match[str]) -> str:
        if match[1] not in env:
            raise KeyError(f"$({match[1]}) names no variable defined before it")
        return env[match[1]]

    return _K8S_VAR.sub(replace, text.replace("$$", "\0")).replace("\0", "$")


def container_environment(container: Mapping[str, Any], pod_name: str) -> dict[str, str]:
    """A container's env as the kubelet makes it, in order; secrets become placeholders."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        source = item.get("valueFrom")
        if source is None:
            env[item["name"]] = k8s_expand(str(item.get("value", "")), env)
        elif "fieldRef" in source and source["fieldRef"]["fieldPath"] == "metadata.name":
            env[item["name"]] = pod_name
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[item["name"]] = f"secret-{ref['name']}-{ref['key']}"
        else:
            raise ValueError(f"env {item['name']}: a source this test does not know: {source}")
    return env


def named_ports(container: Mapping[str, Any]) -> dict[str | int, int]:
    """Port name (and number) -> container port, to resolve probes and targetPorts."""
    ports: dict[str | int, int] = {}
    for port in container.get("ports", []):
        ports[port["containerPort"]] = port["containerPort"]
        if "name" in port:
            ports[port["name"]] = port["containerPort"]
    return ports


# -- one forum process as a manifest starts it -------------------------------------


@dataclass(frozen=True)
class Launch:
    """A ``forum`` process some manifest starts: where, with which argv and env."""

    where: str
    program: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def command(self) -> str:
        return self.argv[0] if self.argv else ""

    def parse(self) -> argparse.Namespace:
        """The argv through the real ``forum`` parser, as the process would parse it."""
        if self.program != "forum":
            raise AssertionError(f"{self.where}: runs {self.program!r}, not forum")
        # The client and worker options read $FORUM_TOKEN and the like when the
        # parser is built: build it in the environment the process would have.
        with _environ(self.env):
            parser = build_parser()
            try:
                args = parser.parse_args(list(self.argv))
            except SystemExit as exc:
                usage = f"forum {' '.join(self.argv)}: bad usage"
                raise AssertionError(f"{self.where}: {usage}") from exc
        # argparse accepts an unambiguous prefix (--max-attempt for --max-attempts);
        # a manifest must not lean on that: a new option could make it ambiguous.
        known = option_strings(parser, args.command)
        for word in self.argv[1:]:
            option = word.partition("=")[0]
            if option.startswith("--"):
                assert option in known, f"{self.where}: {option} is not a forum option"
        return args

    def node_config(self) -> NodeConfig:
        """The node's configuration, layered as ``forum serve`` does (file, env, flags)."""
        args = self.parse()
        if args.command != "serve":
            raise AssertionError(f"{self.where}: not a forum serve")
        flags = serve_flags(args)
        config_file = args.config
        if config_file is not None and not Path(config_file).is_absolute():
            config_file = str(REPO / config_file)
        return NodeConfig.load(config_file, self.env, flags)


def option_strings(parser: argparse.ArgumentParser, command: str) -> set[str]:
    """Every option string of ``forum COMMAND`` (argparse keeps them in private fields)."""
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    sub: argparse.ArgumentParser = commands.choices[command]
    return {option for action in sub._actions for option in action.option_strings}


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with the test run's own FORUM_* variables replaced by ``env``."""
    saved = dict(os.environ)
    try:
        for name in [n for n in os.environ if n.startswith("FORUM_")]:
            del os.environ[name]
        os.environ.update(env)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def launch(where: str, image: Image, command: Sequence[str] | None, args: Sequence[str] | None,
           env: Mapping[str, str]) -> Launch:  # fmt: skip
    """``command`` replaces the ENTRYPOINT and ``args`` the CMD, as Docker and Kubernetes do."""
    argv = [*(image.entrypoint if command is None else command)]
    argv += image.cmd if args is None and command is None else (args or [])
    if not argv:
        raise AssertionError(f"{where}: runs nothing")
    return Launch(where, argv[0], tuple(argv[1:]), {**image.env, **env})


def compose_launches(compose: Mapping[str, Any], docker: Dockerfile) -> Iterator[Launch]:
    """Every service built from deploy/Dockerfile, as a launch."""
    for name, service in compose["services"].items():
        build = service.get("build")
        if build is None:
            continue
        image = docker.image(build.get("target"))
        command = service.get("command")
        entrypoint = service.get("entrypoint")
        yield launch(
            f"compose service {name}", image, entrypoint, command, compose_environment(service)
        )


def url_host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.hostname is None:
        raise AssertionError(f"{url!r} has no host")
    port = parts.port or {"http": 80, "https": 443, "redis": 6379}[parts.scheme]
    return parts.hostname, port


def read_toml(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return tomllib.load(f)
