"""Node and controller logs: one JSON object per event with level, component, node (and log
and epoch for replication events); MSGSTORE_LOG_FORMAT=text for people; a bad format refused
at start; no token and no message payload ever in a line, under a load that logs errors."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import requests

from storage_node import structured_log
from storage_node.cli.local import LocalCluster
from storage_node.client import Client
from tests.integration.node.conftest import NodeProcess
from tests.waiting import wait_until

TOKEN = "tok-SECRET-8c1f0e"
READ_TOKEN = "tok-READ-55d2aa"
WRONG = "tok-WRONG-0b9e77"
PAYLOAD = "PAYLOAD-7f3a9d-card-4111"


def json_lines(path: Path) -> list[dict]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert lines
    docs = []
    for line in lines:
        doc = json.loads(line)  # every line is one JSON object
        assert {"ts", "level", "component", "node", "msg"} <= doc.keys(), doc
        docs.append(doc)
    return docs


def test_json_lines_hold_no_token_and_no_payload(tmp_path: Path) -> None:
    env = {
        "MSGSTORE_TOKEN": TOKEN,
        "MSGSTORE_READ_TOKEN": READ_TOKEN,
        "MSGSTORE_LOG_LEVEL": "DEBUG",
    }
    node = NodeProcess(tmp_path / "n", env, ["--node-id", "n-logs"]).start()
    try:
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        with Client([node.address], token=TOKEN) as client:
            client.create_topic("secrets", 2)
            client.produce("secrets", [{"key": PAYLOAD, "value": PAYLOAD} for _ in range(50)])
            client.commit_offset("g", "secrets", 0, 0)
        url = node.url("/v1/topics/secrets/messages")
        bad = [
            requests.post(url, data=f'[{{"value": "{PAYLOAD}", "tga": 1}}]', headers=auth),
            requests.post(url, data=f'{{"value": "{PAYLOAD}"', headers=auth),
            requests.post(url, json=[{"value": PAYLOAD}], headers={"Authorization": WRONG}),
            requests.post(
                url, json=[{"value": PAYLOAD}], headers={"Authorization": f"Bearer {READ_TOKEN}"}
            ),
            requests.get(node.url(f"/v1/topics/secrets/keys/{PAYLOAD}"), headers=auth),
            requests.get(node.url("/v1/messages/not-an-id"), headers=auth),
        ]
        assert all(r.status_code >= 400 or r.status_code == 200 for r in bad)
        assert bad[0].status_code == 400 and bad[2].status_code == 401
    finally:
        node.stop()
    docs = json_lines(node.log)
    text = node.log.read_text()
    for secret in (TOKEN, READ_TOKEN, WRONG, PAYLOAD):
        assert secret not in text, secret
    assert {d["node"] for d in docs} == {"n-logs"}
    assert any(d["component"] == "node" and "store ready" in d["msg"] for d in docs)
    recovered = [d for d in docs if d["msg"].startswith("recovered in")]
    assert recovered and recovered[0]["log"] == "n-logs" and recovered[0]["level"] == "info"


def test_text_format_for_people_and_a_bad_format_refused(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "t", {"MSGSTORE_LOG_FORMAT": "text"}).start()
    node.stop()
    lines = [line for line in node.log.read_text().splitlines() if line.strip()]
    assert lines and all(not line.startswith("{") for line in lines)
    assert any(" INFO node: store ready in " in line for line in lines), lines
    proc = subprocess.run(
        [sys.executable, "-m", "storage_node.cli", "serve", "--data-dir", str(tmp_path / "x")],
        env={**__import__("os").environ, "MSGSTORE_LOG_FORMAT": "xml"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "MSGSTORE_LOG_FORMAT" in proc.stderr and "json, text" in proc.stderr, proc.stderr
    assert not (tmp_path / "x").exists()  # refused before anything was made


def test_a_token_reaching_a_message_is_redacted(capsys) -> None:  # type: ignore[no-untyped-def]
    structured_log.configure("n0", "INFO", "json", [TOKEN])
    try:
        logging.getLogger("storage_node.server.runtime").warning("peer said %s", TOKEN)
    finally:
        logging.getLogger().handlers.clear()
    line = capsys.readouterr().err.strip()
    doc = json.loads(line)
    assert TOKEN not in line and doc["msg"] == "peer said [redacted]"
    assert doc["component"] == "node" and doc["level"] == "warning"


def _logs_led(addresses: list[str]) -> set[str]:
    """The logs some node says it leads (a node that does not answer leads none)."""
    led = set()
    for address in addresses:
        try:
            doc = requests.get(address + "/v1/replication/status", timeout=5).json()
        except (requests.RequestException, ValueError):
            continue
        led |= {log for log, info in doc.get("logs", {}).items() if info.get("role") == "leader"}
    return led


def test_replication_events_name_their_log_and_epoch(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "c")
    cluster.up(nodes=3, replication_factor=3)
    try:
        cluster.wait_leaders()
        # the routing table names the leaders before each node acts on it (and logs it);
        # on a busy machine the controller may already have moved a slow node's log to
        # another node: any leader will do, each log's events name the log
        wait_until(
            lambda: _logs_led(cluster.addresses) == {n.id for n in cluster.nodes},
            60,
            "every log led by a node",
        )
    finally:
        cluster.down()
    events = []
    for node in cluster.nodes:
        events += [d for d in json_lines(Path(node.log)) if d["component"] == "replication"]
    leading = [d for d in events if d["msg"].startswith("leading from position")]
    following = [d for d in events if d["msg"].startswith("following node-")]
    assert {d["log"] for d in leading} == {"node-0", "node-1", "node-2"}
    assert len(following) >= 6  # each log followed by its two other copies
    assert all(isinstance(d["epoch"], int) and d["epoch"] >= 1 for d in leading)
    controller = json_lines(cluster.dir / "controller.log")
    assert all(d["node"] == "controller" for d in controller)
