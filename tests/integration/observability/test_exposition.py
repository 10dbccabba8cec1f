"""Every /metrics page a real node serves is read by strict parsers (issue: a page with
``msgstore_store_ready`` declared twice, which Prometheus refuses whole), standalone and on a
replicated HTTPS cluster, after a load; the metrics the rules, dashboards and runbook name are
on it, each with help text, a unit and labels from a bounded set."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import requests

from storage_node.cli.local import LocalCluster
from tests.integration.node.conftest import NodeProcess
from tests.integration.observability.exposition import Family, check_text, samples, scrape
from tests.integration.observability.load import (
    CAUGHT_UP_GROUP,
    LAGGING_GROUP,
    PARTITIONS,
    TOPIC,
    produce_and_commit,
)
from tests.integration.observability.referenced import family, referenced_metrics

# every label a msgstore metric may carry: each has a bounded set of values (OPERATIONS.md)
BOUNDED_LABELS = {
    "method", "route", "status", "format", "protocol", "topic", "partition", "group", "log",
    "role", "follower", "state", "task", "certificate", "node", "kind", "operation", "resource",
}  # fmt: skip
UNITS = ("_bytes", "_seconds", "_messages", "_offset", "_replicas", "_info", "_logs")
# gauges whose unit is "a state" (0/1) or a count of things named in the name
UNITLESS = {
    "msgstore_store_ready", "msgstore_draining", "msgstore_log_role", "msgstore_log_epoch",
    "msgstore_log_under_replicated", "msgstore_log_offline", "msgstore_recovery_clean",
    "msgstore_lifecycle_files", "msgstore_files", "msgstore_recovery_corrupt_records",
    "msgstore_recovery_corrupt_files", "msgstore_recovery_replayed_records",
    "msgstore_access_generation",
}  # fmt: skip


def check_families(families: dict[str, Family]) -> None:
    for fam in families.values():
        if not fam.name.startswith("msgstore_"):
            continue  # the client library's process and platform metrics
        assert fam.help.strip(), f"{fam.name} has no help text"
        assert fam.labels <= BOUNDED_LABELS, f"{fam.name}: {fam.labels - BOUNDED_LABELS}"
        if fam.name.startswith("msgstore_store_") or fam.name in UNITLESS:
            continue  # the store's raw statistics carry their unit in their key
        unit_ok = fam.type in ("counter", "histogram") or fam.name.endswith(UNITS)
        assert unit_ok, f"{fam.name} names no unit"


def test_the_first_page_is_refused_with_a_family_declared_twice() -> None:
    page = "# HELP a x\n# TYPE a gauge\na 1\n# HELP a x\n# TYPE a gauge\na 1\n"
    with pytest.raises(AssertionError, match="second HELP of a"):
        check_text(page)


def test_a_standalone_node_serves_a_strict_page(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "n").start()
    try:
        produce_and_commit([node.address])
        families = scrape(node.address)
        check_families(families)
        assert families["msgstore_store_ready"].samples == 1
        for name in (
            "msgstore_group_lag_messages",
            "msgstore_group_lag_seconds",
            "msgstore_partition_next_offset",
            "msgstore_produce_seconds",
            "msgstore_disk_free_bytes",
            "msgstore_lifecycle_bytes",
        ):
            assert families[name].samples, name
        # the lagging group is behind by messages and seconds, the caught-up one by neither
        lag = samples(node.address, "msgstore_group_lag_messages")
        lag_s = samples(node.address, "msgstore_group_lag_seconds")
        committed = samples(node.address, "msgstore_group_committed_offset")
        nxt = samples(node.address, "msgstore_partition_next_offset")
        assert len(lag) == len(lag_s) == 2 * PARTITIONS
        for labels, value in lag.items():
            group, partition = dict(labels)["group"], dict(labels)["partition"]
            end = nxt[(("partition", partition), ("topic", TOPIC))]
            assert value == end - committed[labels]
            if group == LAGGING_GROUP:
                assert value == end - 1 > 0 and lag_s[labels] > 0
            else:
                assert group == CAUGHT_UP_GROUP and value == 0 and lag_s[labels] == 0
    finally:
        node.stop()


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    cluster = LocalCluster(tmp_path_factory.mktemp("obs"))
    cluster.up(nodes=3, replication_factor=3, tls=True)
    try:
        produce_and_commit(cluster.addresses, cluster.ca_file)
        yield cluster
    finally:
        cluster.down()


def test_a_replicated_https_cluster_serves_strict_pages(replicated: LocalCluster) -> None:
    union: dict[str, Family] = {}
    for address in replicated.addresses:
        assert address.startswith("https://")
        families = scrape(address, replicated.ca_file or True)
        check_families(families)
        for name, fam in families.items():
            union.setdefault(family(name), Family(name)).samples += fam.samples
    for name in referenced_metrics():
        assert union.get(name) is not None and union[name].samples, f"{name} is not served"
    assert union["msgstore_log_role"].samples == 27  # 3 logs x 3 copies x 3 roles
    expiry = union["msgstore_tls_certificate_expiry_seconds"]
    assert expiry.samples == 6  # server and CA certificate on each of the three nodes


def test_promtool_accepts_every_page(replicated: LocalCluster, prometheus_bin_dir: Path) -> None:
    for address in replicated.addresses:
        page = requests.get(address + "/metrics", verify=replicated.ca_file, timeout=30).text
        proc = subprocess.run(
            [str(prometheus_bin_dir / "promtool"), "check", "metrics"],
            input=page,
            capture_output=True,
            text=True,
        )
        # 1: a page it cannot parse; 3: lint problems (names, units, help): neither
        assert proc.returncode == 0, proc.stderr
