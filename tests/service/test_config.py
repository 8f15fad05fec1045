"""NodeConfig: defaults, validation, and the layers (TOML < FORUM_* < flags)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forum.node.config.node import NodeConfig


def test_defaults_work_on_a_fresh_machine() -> None:
    config = NodeConfig()
    assert (config.host, config.port) == ("127.0.0.1", 7070)
    assert config.data_dir == Path("forum-data")
    assert config.fsync == "always"
    assert config.token is None and config.cluster_secret is None
    assert config.advertise_url() == "http://127.0.0.1:7070"


def test_layers_flags_win(tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text(
        'listen = "0.0.0.0:8000"\nnode_id = "file"\nfsync = "never"\n'
        'peers = ["http://b:7070", "http://c:7070"]\nmax_payload = "4MiB"\nmax_wait = 5\n'
    )
    env = {
        "FORUM_FSYNC": "interval",
        "FORUM_PEERS": "http://d:7070, http://e:7070",
        "FORUM_NODE": "http://a:7070",  # the client commands': not a node setting
        "HOME": "/root",
    }
    config = NodeConfig.load(toml, env, {"node_id": "flag", "data-dir": "/tmp/x"})
    assert config.listen == "0.0.0.0:8000"
    assert config.node_id == "flag"
    assert config.fsync == "interval"
    assert config.peers == ("http://d:7070", "http://e:7070")
    assert config.max_payload == 4 * 1024 * 1024
    assert config.max_wait == 5.0
    assert config.data_dir == Path("/tmp/x")
    # A wildcard listen address is advertised as something dialable.
    assert config.advertise_url() == "http://127.0.0.1:8000"


def test_config_file_from_the_environment(tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text('token = "from-file"\n')
    assert NodeConfig.load(None, {"FORUM_CONFIG": str(toml)}).token == "from-file"


def test_advertise_and_ipv6() -> None:
    config = NodeConfig(listen="[::1]:7071", advertise="https://node-a.example:443/")
    assert (config.host, config.port) == ("::1", 7071)
    assert config.advertise_url() == "https://node-a.example:443"
    assert NodeConfig(listen="[::1]:7071").advertise_url() == "http://[::1]:7071"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"listen": "7070"}, "listen must be HOST:PORT"),
        ({"listen": "localhost:99999"}, "listen must be HOST:PORT"),
        ({"listen": "::1:7070"}, "brackets"),
        ({"node_id": "has space"}, "origin"),
        ({"peers": "ftp://x"}, "peer must be an http"),
        ({"advertise": "node-a:7070"}, "advertise must be an http"),
        ({"fsync": "sometimes"}, "fsync must be"),
        ({"log_format": "xml"}, "log_format"),
        ({"log_level": "LOUD"}, "log_level"),
        ({"token": ""}, "token must be non-empty"),
        ({"token": " padded "}, "token must be non-empty"),
        ({"max_payload": "0"}, "max_payload must be a positive"),
        ({"max_payload": "12 parsecs"}, "unit"),
        ({"max_payload": True}, "integer"),
        ({"max_batch_bytes": "1", "max_payload": "2"}, "max_batch_bytes"),
        ({"max_wait": "-1"}, "max_wait"),
        ({"max_wait": "inf"}, "max_wait"),
        ({"shutdown_timeout": "soon"}, "shutdown_timeout"),
        ({"colour": "blue"}, "unknown config key 'colour'"),
        ({"peers": 5}, "peers must be a list"),
    ],
)
def test_invalid_values_are_refused_with_a_clear_message(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        NodeConfig().merged(values, source="flags")
    assert str(raised.value).startswith("flags")


def test_bad_toml(tmp_path: Path) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text("listen = \n")
    with pytest.raises(ValueError, match="not valid TOML"):
        NodeConfig.from_toml(toml)
    with pytest.raises(ValueError, match="cannot read"):
        NodeConfig.from_toml(tmp_path / "missing.toml")


def test_frozen() -> None:
    config = NodeConfig()
    with pytest.raises(AttributeError):
        config.listen = "0.0.0.0:1"  # type: ignore[misc]


def test_slow_client_settings() -> None:
    config = NodeConfig.load(
        None, {"FORUM_IDLE_TIMEOUT": "2.5", "FORUM_MAX_CONNECTIONS": "500"}, {"body_timeout": "9"}
    )
    assert (config.idle_timeout, config.body_timeout, config.max_connections) == (2.5, 9.0, 500)
    assert NodeConfig().max_connections is None  # from the open-file limit
    for values, message in [
        ({"idle_timeout": "0"}, "idle_timeout must be"),
        ({"body_timeout": "inf"}, "body_timeout must be"),
        ({"max_connections": "0"}, "max_connections must be a positive"),
    ]:
        with pytest.raises(ValueError, match=message):
            NodeConfig().merged(values, source="flags")


def test_precedence_is_key_by_key_across_the_three_layers(tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text('max_wait = 1\nmax_waiters = 11\nmax_batch = 111\nlog_level = "DEBUG"\n')
    env = {"FORUM_MAX_WAITERS": "22", "FORUM_MAX_BATCH": "222", "FORUM_SHUTDOWN_TIMEOUT": "2"}
    config = NodeConfig.load(toml, env, {"max_batch": "333", "body_timeout": "3"})
    assert (config.max_wait, config.max_waiters, config.max_batch) == (1.0, 22, 333)
    assert (config.log_level, config.shutdown_timeout, config.body_timeout) == ("DEBUG", 2.0, 3.0)
    assert config.idle_timeout == NodeConfig().idle_timeout  # set nowhere: the default


def test_layers_are_judged_together_not_one_by_one(tmp_path: Path) -> None:
    """A file's small segments alone refuse the default max_payload; the
    environment's smaller max_payload makes the whole right. (It was refused,
    naming the file, before the layers were merged first.)"""
    toml = tmp_path / "node.toml"
    toml.write_text('segment_bytes = "64KiB"\n')
    config = NodeConfig.load(toml, {"FORUM_MAX_PAYLOAD": "16KiB"})
    assert (config.segment_bytes, config.max_payload) == (64 * 1024, 16 * 1024)
    with pytest.raises(ValueError, match=r"node\.toml: max_payload must be at most"):
        NodeConfig.load(toml, {})


def _one_line(raised: pytest.ExceptionInfo[ValueError]) -> str:
    message = str(raised.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("toml", "env", "flags", "expected"),
    [
        ('max_wait = "soon"\n', {}, {}, "{file}: max_wait must be a finite number of seconds"),
        ("listen = 7070\n", {}, {}, "{file}: listen must be HOST:PORT, not 7070"),
        ("peers = 5\n", {}, {}, "{file}: peers must be a list of http(s) URLs, not 5"),
        ("", {"FORUM_MAX_WAIT": "soon"}, {}, "FORUM_MAX_WAIT: max_wait must be a finite number"),
        ("", {"FORUM_MAX_BATCH": "1.5"}, {}, "FORUM_MAX_BATCH: max_batch must be a positive int"),
        ("", {"FORUM_FSYNC": "often"}, {}, "FORUM_FSYNC: fsync must be always, interval or never"),
        ("", {}, {"max_wait": "soon"}, "--max-wait: max_wait must be a finite number of seconds"),
        ("", {}, {"max_waiters": "many"}, "--max-waiters: max_waiters must be a positive integer"),
        ("", {}, {"peers": ["ftp://x"]}, "--peer: peer must be an http(s) URL, not 'ftp://x'"),
    ],
    ids=["file-seconds", "file-listen", "file-peers", "env-seconds", "env-int", "env-literal",
         "flag-seconds", "flag-int", "flag-peer"],
)  # fmt: skip
def test_a_bad_type_names_its_source_and_key(
    tmp_path: Path, toml: str, env: dict[str, str], flags: dict[str, object], expected: str
) -> None:
    path = tmp_path / "node.toml"
    path.write_text(toml)
    with pytest.raises(ValueError) as raised:
        NodeConfig.load(path, env, flags)
    assert _one_line(raised).startswith(expected.format(file=path))


@pytest.mark.parametrize(
    ("env", "flags", "source"),
    [
        ({"FORUM_SEGMENT_BYTES": "64 parsecs"}, {}, "FORUM_SEGMENT_BYTES: segment_bytes"),
        ({}, {"max_batch_bytes": "64MB"}, "--max-batch-bytes: max_batch_bytes"),
        ({}, {"max_payload": "1.5MiB"}, "--max-payload: max_payload"),
    ],
)
def test_a_bad_unit_is_refused(env: dict[str, str], flags: dict[str, object], source: str) -> None:
    with pytest.raises(ValueError, match="unit: KiB, MiB or GiB") as raised:
        NodeConfig.load(None, env, flags)
    assert _one_line(raised).startswith(source)


def test_sizes_take_units_in_every_layer(tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text('max_batch_bytes = "8MiB"\n')
    config = NodeConfig.load(toml, {"FORUM_MAX_PAYLOAD": "512k"}, {"segment_bytes": "1_GiB"})
    assert (config.max_batch_bytes, config.max_payload) == (8 << 20, 512 << 10)
    assert config.segment_bytes == 1 << 30


def test_an_unknown_key_in_the_file_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text("max_wiat = 5\n")
    with pytest.raises(ValueError) as raised:
        NodeConfig.load(toml, {})
    assert _one_line(raised) == f"{toml}: unknown config key 'max_wiat' (did you mean 'max_wait'?)"
    toml.write_text("[replication]\nmax_batch = 5\n")  # replication is FORUM_REPL_* only
    with pytest.raises(ValueError, match="unknown config key 'replication'"):
        NodeConfig.load(toml, {})


def test_a_misspelt_forum_variable_is_refused() -> None:
    """``FORUM_TOKNE`` was ignored: the node started with its API open."""
    with pytest.raises(ValueError) as raised:
        NodeConfig.load(None, {"FORUM_TOKNE": "s3cret"})
    assert _one_line(raised) == (
        "FORUM_TOKNE: unknown config key 'tokne' (did you mean FORUM_TOKEN?)"
    )


def test_other_commands_forum_variables_are_let_through() -> None:
    """Each ``FORUM_*`` variable the docs name for something else than the node
    (tests/deploy/test_docs.py) is no misspelling of a node setting."""
    from tests.deploy.test_docs import OTHER_VARIABLES  # noqa: PLC0415

    env = dict.fromkeys(OTHER_VARIABLES - {"FORUM_CONFIG"}, "x")
    env["FORUM_REPL_ANYTHING"] = "replication's to judge"
    assert NodeConfig.load(None, env) == NodeConfig()


def test_a_secret_is_not_shown_in_its_refusal() -> None:
    with pytest.raises(ValueError, match="FORUM_TOKEN: token must be non-empty") as raised:
        NodeConfig.load(None, {"FORUM_TOKEN": "s3cret "})
    assert "s3cret" not in _one_line(raised)


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_bytes(b'node_id = "caf\xe9"\n')
    with pytest.raises(ValueError, match=f"config file {toml} is not valid TOML: not UTF-8"):
        NodeConfig.load(toml, {})


def test_a_value_built_in_code_is_held_to_the_same_rules() -> None:
    for values, message in [
        ({"max_batch": 0}, "max_batch must be a positive integer, not 0"),
        ({"listen": 7070}, "listen must be HOST:PORT, not 7070"),
        ({"max_wait": float("inf")}, "max_wait must be a finite number of seconds >= 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            NodeConfig(**values)  # type: ignore[arg-type]


def test_the_error_examples_in_the_operations_guide_are_what_the_loader_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forum.replication.config import ReplicationConfig  # noqa: PLC0415
    from tests.deploy.artifacts import OPERATIONS  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    Path("node.toml").write_text("max_wiat = 5\n")
    attempts = [
        lambda: NodeConfig.load(None, {"FORUM_MAX_WAIT": "soon"}),
        lambda: NodeConfig.load(None, {}, {"max_payload": "12parsecs"}),
        lambda: NodeConfig.load("node.toml", {}),
        lambda: ReplicationConfig.from_env({"FORUM_REPL_DEAD_AFTER": "5s"}),
    ]
    guide = OPERATIONS.read_text()
    for attempt in attempts:
        with pytest.raises(ValueError) as raised:
            attempt()
        assert f"- `forum serve: {raised.value}`" in guide
