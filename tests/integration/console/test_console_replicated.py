"""The cluster and replication pages of a replicated cluster (factor 3), through a console
process: every node's led and followed logs, each log's epochs and followers' lag; then a
stopped node: its health says so and the logs it copied are under-replicated; and a key
search still finds order 42 through the log's new leader."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from waiting import wait_until

from storage_node.cli.local import LocalCluster
from storage_node.cli.local_console import LocalConsole
from storage_node.client import Client
from storage_node.server.routing_state import read_routing_file
from tests.integration.console.conftest import ORDERS, get, rows, text_of


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, str]]:
    c = LocalCluster(tmp_path_factory.mktemp("console-rf3"))
    c.up(nodes=3, env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0"}, replication_factor=3)
    console = LocalConsole(c.dir)
    try:
        c.wait_leaders()
        with Client(c.addresses) as client:
            client.create_topic(ORDERS, partitions=3)
            client.produce(ORDERS, [{"key": "order-42", "value": '{"order": 42}'}])
        yield c, console.start(c.addresses, scrape_seconds=0.5).url
    finally:
        console.stop()
        c.down()


def node_rows(html: str) -> dict[str, list[str]]:
    found = re.findall(
        r'<tr class="(?:ok|down)">\s*<td>(node-\d)</td><td>[^<]*</td>\s*'
        r'<td class="health">([^<]*)</td>\s*<td>([^<]*)</td><td>([^<]*)</td>',
        html,
    )
    return {node: [health, led, followed] for node, health, led, followed in found}


def test_the_replication_page_shows_epochs_and_followers_lag(replicated):
    cluster, base = replicated
    table = read_routing_file(cluster.routing_file)
    page = get(base, "/replication")
    assert page.status_code == 200
    shown = rows(page.text, "log-row")
    assert [(r[0], r[1], int(r[2])) for r in shown] == [
        (i, lg.leader, lg.epoch) for i, lg in sorted(table.logs.items())
    ]
    for r in shown:
        assert f"{r[2]}: " in r[3]  # the current epoch is in the log's epochs
        followers = [n for n in table.logs[r[0]].replicas if n != table.logs[r[0]].leader]
        for node in followers:
            assert re.search(rf"{node}: \d+ bytes behind, in sync", r[6]), r[6]


def test_the_cluster_page_shows_logs_led_followed_and_under_replicated(replicated):
    cluster, base = replicated
    replicated = cluster
    table = read_routing_file(replicated.routing_file)
    page = get(base, "/")
    nodes = node_rows(page.text)
    assert sorted(nodes) == ["node-0", "node-1", "node-2"]
    for node, (health, led, followed) in nodes.items():
        assert health == "ready"
        assert led == ", ".join(sorted(i for i, lg in table.logs.items() if lg.leader == node))
        assert sorted(followed.split(", ")) == sorted(
            i for i, lg in table.logs.items() if node in lg.replicas and lg.leader != node
        )
    assert text_of(page.text, "under-replicated") == "No log is under-replicated."

    replicated.stop("node-2")
    try:

        def under() -> set[str] | None:
            text = text_of(get(base, "/").text, "under-replicated")
            logs = set(text.removeprefix("Under-replicated: ").split(", "))
            # factor 3 on 3 nodes: every log had a copy on node-2
            return logs if logs == set(table.logs) else None

        wait_until(under, 90, "every log reported under-replicated")
        nodes = node_rows(get(base, "/").text)
        assert nodes["node-2"][0] != "ready"
        found = wait_until(
            lambda: rows(get(base, f"/search?topic={ORDERS}&key=order-42").text) or None,
            60,
            "order 42 found through the logs' leaders",
        )
        assert [r[3] for r in found] == ["order-42"]
    finally:
        replicated.restart("node-2")
