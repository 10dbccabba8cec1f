"""The msgstore CLI end to end: local up, topics, produce from stdin, consume, get, query, down."""

from __future__ import annotations

import json
import subprocess
import sys

import requests


def msgstore(*args, stdin=None, check=True):
    proc = subprocess.run(
        [sys.executable, "-m", "storage_node.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_cli_round_trip(tmp_path):
    data_dir = str(tmp_path / "cli-cluster")
    up = msgstore("local", "up", "--nodes", "2", "--data-dir", data_dir)
    try:
        endpoint = up.stdout.split()[1]
        assert endpoint.startswith("http://127.0.0.1:")
        assert requests.get(endpoint + "/readyz").status_code == 200
        ep = ["--endpoint", endpoint]
        created = json.loads(msgstore("topic", "create", "orders", "--partitions", "4", *ep).stdout)
        assert sorted(set(created["owners"])) == ["node-0", "node-1"]
        assert "orders\tpartitions=4" in msgstore("topic", "list", *ep).stdout
        lines = "".join(json.dumps({"order_id": f"o{i % 3}", "n": i}) + "\n" for i in range(30))
        produced = msgstore(
            "produce",
            "orders",
            "--key-field",
            "order_id",
            "--print-results",
            "--quiet",
            *ep,
            stdin=lines,
        )
        results = [json.loads(line) for line in produced.stdout.splitlines()]
        assert len(results) == 30 and "produced 30" in produced.stderr
        consumed = msgstore("consume", "orders", "--group", "g", *ep).stdout.splitlines()
        assert sorted(json.loads(m)["value"] for m in consumed) == sorted(lines.splitlines())
        assert msgstore("consume", "orders", "--group", "g", *ep).stdout == ""  # committed
        got = json.loads(msgstore("get", results[4]["msg_id"], *ep).stdout)
        assert json.loads(got["value"]) == {"order_id": "o1", "n": 4}
        query = msgstore("query", "orders", "o2", "--max", "5", *ep)
        assert len(query.stdout.splitlines()) == 5 and "more than 5" in query.stderr
        missing = msgstore("get", "app-7f000001-400000-99", *ep, check=False)
        assert missing.returncode == 1 and "not_found" in missing.stderr
        bad = msgstore("produce", "orders", "--quiet", *ep, stdin="{broken\n", check=False)
        assert bad.returncode == 1 and "line 1: not JSON" in bad.stderr
        again = msgstore("local", "up", "--nodes", "2", "--data-dir", data_dir, check=False)
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        down = msgstore("local", "down", "--data-dir", data_dir)
    assert "stopped 2 node(s)" in down.stdout
    # a restarted local cluster keeps its topics and data
    up = msgstore("local", "up", "--nodes", "2", "--data-dir", data_dir)
    try:
        endpoint = up.stdout.split()[1]
        info = requests.get(endpoint + "/v1/topics/orders").json()
        assert sum(p["next_offset"] for p in info["partition_offsets"]) == 30
    finally:
        msgstore("local", "down", "--data-dir", data_dir)


def test_the_console_takes_the_connection_options_with_its_own_token(monkeypatch):
    """``msgstore console`` shares the commands' --endpoint/--token/--ca, but must be told
    the cluster (no default endpoint) and reads its own token, never a user's."""
    from storage_node.cli.common import DEFAULT_ENDPOINT
    from storage_node.cli.main import build_parser

    for name in ("MSGSTORE_ENDPOINT", "MSGSTORE_CA", "MSGSTORE_CONSOLE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MSGSTORE_TOKEN", "a-user's")
    console = build_parser("console").parse_args(["console"])
    assert (console.endpoint, console.token, console.ca) == (None, None, None)
    listing = build_parser("topic").parse_args(["topic", "list"])
    assert (listing.endpoint, listing.token) == (DEFAULT_ENDPOINT, "a-user's")
    monkeypatch.setenv("MSGSTORE_CONSOLE_TOKEN", "the console's")
    monkeypatch.setenv("MSGSTORE_CA", "ca.pem")
    console = build_parser("console").parse_args(["console", "--endpoint", "http://n:1"])
    assert (console.endpoint, console.token, console.ca) == (
        "http://n:1",
        "the console's",
        "ca.pem",
    )
    refused = msgstore("console", check=False)
    assert refused.returncode == 2 and "give the cluster with --endpoint" in refused.stderr
