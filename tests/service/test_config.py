"""NodeConfig: defaults, validation, and the layers (TOML < FORUM_* < flags)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.config import NodeConfig


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
        "FORUM_UNRELATED_THING": "ignored: not a config key",
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
