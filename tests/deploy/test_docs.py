"""docs/operations.md, docs/coordination.md, docs/tasks.md, README.md and deploy/README.md
against the code: every ``forum`` command in them parses with the real CLI
(a synopsis, with ``[optional]`` parts or PLACEHOLDERS, names only real
options), every
metric and labelled series they name is one that the node, replication or a
worker really exposes, every ``FORUM_*`` variable is a real setting, and
every file they link to exists."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from forum.cli import build_parser
from forum.coordinator.metrics import worker_registry
from forum.coordinator.stats import WorkerStats
from forum.coordinator.tallies import Tallies
from forum.dashboard.lensmetrics import LensCounts
from forum.deploy.history import Verdict
from forum.node.api.status import PeerStatus
from forum.node.client.remote import ForumClient
from forum.node.config import node as config
from forum.node.config.node import NodeConfig
from forum.replication.config import ReplicationConfig
from forum.replication.messages import PUSH_PATH
from forum.replication.metrics import ReplicationMetrics
from tests.deploy.artifacts import DEPLOY, OPERATIONS, REPO
from tests.fixtures.nodes import ForumNodes

DOCS = (
    OPERATIONS,
    REPO / "docs" / "coordination.md",
    REPO / "docs" / "tasks.md",
    REPO / "README.md",
    DEPLOY / "README.md",
)
#: FORUM_* variables read by something other than NodeConfig.
# The variables that are not settings: the node's own (FORUM_CONFIG, the
# client commands' --node, the worker's --redis-url, the event loop) and the
# examples'.
OTHER_VARIABLES = config.OTHER_VARIABLES | {
    "FORUM_EXAMPLE_REDIS_URL",  # examples/handlers/fenced_redis.py
    "FORUM_EXAMPLE_LENS_NAMESPACE",  # examples/handlers/fenced_redis.py
    "FORUM_EXAMPLE_SQLITE",  # the SQLite examples
}


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def forum_commands(text: str) -> list[list[str]]:
    """Each ``forum ...`` command in the code blocks, continuations joined, the
    environment assignments before it and a trailing ``&`` dropped."""
    commands = []
    for block in code_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            # Only shell lines that run forum (code blocks hold Python too, and
            # what forum prints: "forum serve: <why it stopped>" is no command).
            if not re.match(r"\s*([A-Z_]+=\S+\s+)*forum\s+[a-z-]+(\s|$)", line):
                continue
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                words.pop(0)
            if words and words[0] == "forum":
                commands.append([w for w in words[1:] if w != "&"])
    return commands


def test_every_forum_command_in_the_docs_parses() -> None:
    commands = [c for path in DOCS for c in forum_commands(path.read_text())]
    assert len(commands) >= 8
    parser = build_parser(eager=True)
    known = every_option(parser)
    for argv in commands:
        # A synopsis: [optional] parts, alternatives, PLACEHOLDERS.
        synopsis = any(w.startswith("[") or w == "|" or w.isupper() for w in argv)
        try:
            if not synopsis:
                parser.parse_args(argv)
        except SystemExit as exc:
            raise AssertionError(f"forum {' '.join(argv)}: bad usage") from exc
        for word in argv:
            option = word.lstrip("[").rstrip("]").partition("=")[0]
            # No abbreviations (argparse would take --max-attempt for --max-attempts).
            assert not option.startswith("--") or option in known, f"{option} in forum {argv}"


def every_option(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings of the parser and of all its subcommands, at any depth."""
    options = set()
    for action in parser._actions:
        options.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                options |= every_option(sub)
    return options


def test_every_forum_variable_in_the_docs_is_a_real_setting() -> None:
    node = {f"FORUM_{name.upper()}" for name in NodeConfig.__dataclass_fields__}
    replication = {f"FORUM_REPL_{name.upper()}" for name in ReplicationConfig.__dataclass_fields__}
    for path in DOCS:
        named = set(re.findall(r"\bFORUM_[A-Z_]*[A-Z]\b", path.read_text()))
        named = {n for n in named if n != "FORUM_REPL"}
        unknown = named - node - replication - OTHER_VARIABLES
        assert not unknown, f"{path.name} names {unknown}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file(path: Path) -> None:
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text()):
        assert (path.parent / target).exists(), f"{path.name} links to missing {target}"


#: A file of the repository named in prose: a path with a folder and a suffix.
_FILE_PATH = re.compile(
    r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+\.(?:py|lua|md|toml|yml|yaml|json|html|sh))"
)


@pytest.mark.parametrize(
    "path", [*(REPO / "docs").glob("*.md"), REPO / "README.md", DEPLOY / "README.md"],
    ids=lambda p: p.name,
)  # fmt: skip
def test_every_file_the_docs_name_exists(path: Path) -> None:
    """The docs name modules by their path (``node/forum/node/storage/strand.py``):
    each is there, so a move that forgets the docs fails here."""
    missing = {
        named
        for named in _FILE_PATH.findall(path.read_text())
        if not (REPO / named).exists() and not (path.parent / named).exists()
    }
    assert missing == set(), f"{path.name} names files that are not there"


def exposed_names(exposition: str) -> set[str]:
    """Metric names in a Prometheus text page (``# TYPE`` lines, with the
    ``_bucket``/``_sum``/``_count`` series of histograms)."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition, flags=re.MULTILINE):
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


async def test_every_metric_in_the_docs_is_exposed(forum_nodes: ForumNodes) -> None:
    node = await forum_nodes.start("metrics")
    async with aiohttp.ClientSession() as session, session.get(node.url + "/metrics") as response:
        assert response.status == 200
        exposed = exposed_names(await response.text())
    registry = CollectorRegistry()
    replication = ReplicationMetrics(registry)
    peer = PeerStatus("http://peer:7070", None, "peer-1", True, "alive", 0.0, 0.1, 0, None, 0, 0)
    replication.watch_peers(lambda: [peer])
    exposed |= exposed_names(generate_latest(registry).decode())
    exposed |= exposed_names(generate_latest(worker_registry(WorkerStats)).decode())
    lens = CollectorRegistry()  # what a node serving the dashboard with --lens-url adds
    counts = LensCounts(_no_read)
    await counts.refresh()
    lens.register(counts)
    exposed |= exposed_names(generate_latest(lens).decode())
    named = set(re.findall(r"\bforum_[a-z_]+[a-z]\b", OPERATIONS.read_text()))
    missing = named - exposed
    assert not missing, f"docs/operations.md names metrics nothing exposes: {sorted(missing)}"
    assert len(named) >= 25


async def _no_read() -> Tallies:
    """The Lens's counts before any was counted."""
    return Tallies()


def documented_series(text: str) -> set[str]:
    """Each ``metric{label="value"}`` the text names, as exposition writes it."""
    return set(re.findall(r'\bforum_[a-z_]+\{[a-z_]+="[^"]*"\}', text))


#: Labels whose values are open-ended (any HTTP status the node answers): the
#: docs may name a value that a fresh node has not counted yet.
_OPEN_LABELS = frozenset({"status"})


def exposed_label_values(exposition: str) -> set[tuple[str, str, str]]:
    """Every (metric, label, value) in a Prometheus text page, and (metric,
    label, "*") for the open-ended labels."""
    found = set()
    for name, labels in re.findall(r"^(forum_[a-z_]+)\{([^}]*)\}", exposition, re.MULTILINE):
        for key, value in re.findall(r'([a-z_]+)="([^"]*)"', labels):
            found.add((name, key, value))
            if key in _OPEN_LABELS:
                found.add((name, key, "*"))
    return found


async def test_every_labelled_series_in_the_docs_is_exposed(forum_nodes: ForumNodes) -> None:
    """The label values too: the docs once said reason "unauthenticated", which
    the node never emits (it says "unauthorized"). A replication request with
    a forged signature makes the node count one refusal."""
    node = await forum_nodes.start("labels", "--cluster-secret", "s3cret")
    async with ForumClient(node.url) as client:
        await client.write(b"job/1")  # a prefix's series (docs/operations.md, autoscaling)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{node.url}{PUSH_PATH}", data=b"forged") as response:
            assert response.status == 401
        async with session.get(node.url + "/metrics") as response:
            exposition = await response.text()
    stats = WorkerStats(done=1, retried=1, dead=1, double_takes=1, claims_lost=1)
    exposition += generate_latest(worker_registry(lambda: stats)).decode()
    exposed = exposed_label_values(exposition)
    named = set().union(*(documented_series(path.read_text()) for path in DOCS))
    assert 'forum_replication_requests_refused_total{reason="unauthorized"}' in named
    missing = set()
    for item in named:
        name, key, value = re.findall(r'([a-z_]+)\{([a-z_]+)="([^"]*)"\}', item)[0]
        if (name, key, value) not in exposed and (name, key, "*") not in exposed:
            missing.add(item)
    assert not missing, f"the docs name series nothing exposes: {sorted(missing)}"


def test_the_readme_verdict_is_the_checkers_format() -> None:
    """The example verdict in README.md has the fields, in the order, that
    ``forum cluster demo`` prints (it once lacked ``reruns=``)."""
    (example,) = re.findall(r"^\s+(OK: attempted=.*)$", (REPO / "README.md").read_text(), re.M)
    verdict = Verdict(2000, 2000, 2000, (), (), 0, 0, 0, ())
    assert example == verdict.summary()
