"""A real Prometheus (built from its Go module) on loopback scrapes a real 3-node replicated
`msgstore local` cluster over HTTPS with the chart's alert rules (short `for:` and windows):
after a small load, every expression of every dashboard panel and every selector of every
rule returns a series; a lagging consumer group fires the lag alert; killing a node fires the
node-down and under-replicated alerts, which resolve once it is back."""

from __future__ import annotations

import threading
from pathlib import Path

from storage_node.cli.local import LocalCluster
from storage_node.client import Client
from tests.integration.observability.load import (
    LAGGING_GROUP,
    TOPIC,
    commit_ends,
    produce_and_commit,
)
from tests.integration.observability.prometheus_server import Prometheus


def keep_producing(addresses: list[str], ca: str | None, stop: threading.Event) -> None:
    """A message a few times a second (bounded: until ``stop``, at most 10 minutes), with the
    caught-up group committing as it goes."""
    with Client(addresses, ca=ca) as client:
        for i in range(6000):
            if stop.wait(0.1):
                return
            try:
                client.produce(TOPIC, [{"key": f"live-{i}", "value": f"v{i}"}])
                if i % 10 == 0:
                    commit_ends(addresses, ca)
            except Exception:  # noqa: BLE001 - a node is down on purpose part of the time
                pass


def test_dashboards_and_rules_against_a_real_prometheus(
    tmp_path: Path, prometheus_bin_dir: Path
) -> None:
    cluster = LocalCluster(tmp_path / "c")
    cluster.up(nodes=3, replication_factor=3, tls=True)
    prom = Prometheus(prometheus_bin_dir, tmp_path / "prom")
    stop = threading.Event()
    loader = threading.Thread(
        target=keep_producing, args=(cluster.addresses, cluster.ca_file, stop), daemon=True
    )
    try:
        produce_and_commit(cluster.addresses, cluster.ca_file)
        prom.start(cluster.addresses, cluster.ca_file)
        loader.start()
        prom.wait_for(lambda: len(prom.query('up{job="msgstore"} == 1')) == 3, "3 targets up")

        prom.wait_every_query_answers()

        lag = prom.wait_for(
            lambda: prom.firing("MsgstoreConsumerLagGrowing"), "lag alert firing", 120
        )
        assert LAGGING_GROUP in {a["group"] for a in lag}
        assert not prom.firing("MsgstoreUnderReplicatedLogs")

        victim = cluster.nodes[2]
        cluster.kill(victim.id)
        down = prom.wait_for(lambda: prom.firing("MsgstoreNodeDown"), "node down", 120)
        assert {a["instance"] for a in down} == {f"127.0.0.1:{victim.port}"}
        under = prom.wait_for(
            lambda: prom.firing("MsgstoreUnderReplicatedLogs"), "under-replicated", 120
        )
        assert under

        cluster.restart(victim.id)
        prom.wait_for(
            lambda: (
                not prom.firing("MsgstoreUnderReplicatedLogs")
                and not prom.firing("MsgstoreNodeDown")
            ),
            "alerts resolved after the node's return",
            180,
        )
    finally:
        stop.set()
        if loader.is_alive():
            loader.join(60)
        prom.stop()
        cluster.down()
