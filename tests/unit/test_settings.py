"""Settings precedence (defaults < file < env < flags) and clear errors for bad values."""

from __future__ import annotations

import json

import pytest

from storage_node.errors import InvalidArgument
from storage_node.server.settings import build_store_config, resolve_settings


def test_precedence(tmp_path):
    cfg = tmp_path / "node.json"
    cfg.write_text(
        json.dumps({"port": 7001, "node_id": "from-file", "flush_mode": "async", "token": "f"})
    )
    env = {"MSGSTORE_PORT": "7002", "MSGSTORE_TOKEN": "e", "MSGSTORE_SEGMENT_BYTES": "1_048_576"}
    s = resolve_settings({"data_dir": str(tmp_path), "port": 7003, "config": str(cfg)}, env=env)
    assert s.port == 7003 and s.token == "e" and s.node_id == "from-file"
    store = build_store_config(s)
    assert store.flush_mode == "async" and store.segment_bytes == 1 << 20
    assert store.data_dir == str(tmp_path)


def test_yaml_file_and_env_only(tmp_path):
    cfg = tmp_path / "node.yaml"
    cfg.write_text("max_body_bytes: 1000\nlifecycle_interval_s: 0\n")
    s = resolve_settings({}, env={"MSGSTORE_DATA_DIR": str(tmp_path), "MSGSTORE_CONFIG": str(cfg)})
    assert s.max_body_bytes == 1000 and s.store["lifecycle_interval_s"] == 0.0


@pytest.mark.parametrize(
    "flags, env, message",
    [
        ({}, {}, "data directory"),
        ({"data_dir": "d"}, {"MSGSTORE_PORT": "http"}, "port"),
        ({"data_dir": "d"}, {"MSGSTORE_PORT": "70000"}, "out of range"),
        ({"data_dir": "d"}, {"MSGSTORE_FLUSH_MODE": "sometimes"}, "flush_mode"),
        ({"data_dir": "d"}, {"MSGSTORE_KAFKA_PORT": "70000"}, "Kafka port"),
        ({"data_dir": "d"}, {"MSGSTORE_KAFKA_ADVERTISE": "nohost"}, "host:port"),
    ],
)
def test_bad_settings(flags, env, message):
    with pytest.raises(InvalidArgument, match=message):
        build_store_config(resolve_settings(flags, env=env))


def test_a_kafka_port_with_a_token_and_tls_is_accepted(tmp_path):
    """The Kafka listener requires SASL with a token and serves TLS with the node's
    certificate, so a node with both may serve Kafka (it was refused before SASL existed)."""
    (tmp_path / "c.pem").write_text("x")
    (tmp_path / "k.pem").write_text("x")
    env = {"MSGSTORE_TOKEN": "t", "MSGSTORE_READ_TOKEN": "r"}
    flags = {"data_dir": "d", "kafka_port": 9092}
    flags |= {"tls_cert": str(tmp_path / "c.pem"), "tls_key": str(tmp_path / "k.pem")}
    s = resolve_settings(flags, env=env)
    assert (s.kafka_port, s.token, s.tls_cert) == (9092, "t", str(tmp_path / "c.pem"))


def test_unknown_file_setting_is_an_error(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"prot": 1}')
    with pytest.raises(InvalidArgument, match="prot"):
        resolve_settings({"data_dir": "d", "config": str(cfg)}, env={})


def test_unknown_flag_setting_is_an_error():
    with pytest.raises(InvalidArgument, match="prot"):
        resolve_settings({"data_dir": "d", "prot": "1"}, env={})


def test_store_config_from_env(monkeypatch, tmp_path):
    """The store's fields come from MSGSTORE_* variables the node's one way (no second
    parser in the store)."""
    monkeypatch.setenv("MSGSTORE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MSGSTORE_FLUSH_MODE", "async")
    monkeypatch.setenv("MSGSTORE_SEGMENT_BYTES", "12345")
    monkeypatch.setenv("MSGSTORE_COMPACT_AFTER_S", "1.5")
    monkeypatch.setenv("MSGSTORE_OBJECT_STORE_URL", "s3://bucket/prefix")
    cfg = build_store_config(resolve_settings())
    assert (cfg.data_dir, cfg.flush_mode, cfg.segment_bytes, cfg.compact_after_s) == (
        str(tmp_path),
        "async",
        12345,
        1.5,
    )
    assert cfg.object_store_url == "s3://bucket/prefix"
    monkeypatch.setenv("MSGSTORE_FLUSH_MODE", "sometimes")
    with pytest.raises(InvalidArgument):
        build_store_config(resolve_settings())
