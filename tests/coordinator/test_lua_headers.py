"""Each Lens script's header (its ``KEYS`` and ``ARGV`` comments) agrees with
``KEY_ROLES``, which builds the ``KEYS`` the Lens sends, and with the
conventions forum.coordinator.scripts states: the claim key first in ``ARGV`` for
a script about one key, the shard's epoch marker last in ``KEYS`` and the
epoch the Lens saw last in ``ARGV``, and no ``KEYS[n]`` or ``ARGV[n]`` in a
body that its header does not document."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files

import pytest

from forum.coordinator.keys import HISTORY_LENGTH
from forum.coordinator.scripts import BATCH_ROLES, KEY_ROLES

LUA = files("forum.coordinator.lua")
_PER_KEY = {"claim", "done", "job", "task", "history", "attempts"}


@dataclass(frozen=True)
class Header:
    keys: dict[int, str]  # KEYS index -> the role named by "<tag>:<role>"
    batch: str | None  # a batch script's KEYS[1..n] role (then KEYS[n+1], ... as keys[1], ...)
    argv: dict[int, str]  # ARGV index -> its description
    body: str


def header(name: str) -> Header:
    text = LUA.joinpath(f"{name}.lua").read_text()
    lines = text.splitlines()
    comments = []
    for line in lines:
        if not line.startswith("--"):
            break
        comments.append(line)
    body = "\n".join(lines[len(comments) :])
    keys = {}
    argv = {}
    batch = None
    for line in comments:
        if found := re.match(r"-- KEYS\[1\.\.n\]\s+<tag>:(\w+)", line):
            batch = found[1]
        elif found := re.match(r"-- KEYS\[(?:n\+)?(\d+)\]\s+<tag>:(\w+)", line):
            keys[int(found[1])] = found[2]
        elif found := re.match(r"-- ARGV\[(\d+)\]\s+(.*)", line):
            argv[int(found[1])] = found[2]
    return Header(keys, batch, argv, body)


SCRIPTS = sorted(KEY_ROLES)


def test_every_script_file_has_its_roles_and_every_role_its_file() -> None:
    on_disk = {
        entry.name.removesuffix(".lua")
        for entry in LUA.iterdir()
        if entry.name.endswith(".lua") and entry.name != "prelude.lua"
    }
    assert on_disk == set(KEY_ROLES)


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_header_keys_are_the_key_roles_in_order(name: str) -> None:
    keys = header(name).keys
    assert sorted(keys) == list(range(1, len(keys) + 1)), "KEYS numbered 1..n"
    assert header(name).batch == BATCH_ROLES.get(name), "a batch script's KEYS[1..n] role"
    assert tuple(keys[i] for i in sorted(keys)) == KEY_ROLES[name]


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_argv_follow_the_conventions(name: str) -> None:
    argv = header(name).argv
    assert sorted(argv) == list(range(1, len(argv) + 1)), "ARGV numbered 1..n"
    if _PER_KEY & set(KEY_ROLES[name]):
        assert argv[1].startswith("the claim key"), "a script about one key takes it first"
    if name != "epoch":
        assert KEY_ROLES[name][-1] == "epoch", "the shard's marker is the last KEY"
        assert argv[len(argv)].startswith("the epoch the Lens saw"), "and its epoch the last ARGV"


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_body_uses_only_documented_keys_and_argv(name: str) -> None:
    script = header(name)
    used_keys = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", script.body)}
    used_argv = {int(n) for n in re.findall(r"ARGV\[(\d+)\]", script.body)}
    assert used_keys <= set(script.keys)
    assert used_argv <= set(script.argv)


def test_the_prelude_keeps_as_many_history_events_as_the_key_schema_says() -> None:
    prelude = LUA.joinpath("prelude.lua").read_text()
    assert f"local HISTORY_LENGTH = {HISTORY_LENGTH}\n" in prelude
