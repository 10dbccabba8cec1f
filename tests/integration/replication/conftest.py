"""A fresh netns cluster per test (skipped where namespaces cannot be made)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.replication.netns_cluster import NetnsCluster, netns_available
from tests.integration.replication.workload import PARTITIONS, TOPIC


@pytest.fixture(params=["http", "mtls"])
def cluster(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[NetnsCluster]:
    """Plain HTTP, or HTTPS with mTLS between the nodes and the controller (the test's own
    requests verify the nodes with the cluster's CA through REQUESTS_CA_BUNDLE)."""
    why = netns_available()
    if why is not None:
        if os.geteuid() == 0:  # root can make namespaces: a missing tool is a broken setup
            pytest.fail(f"network namespaces unavailable as root: {why}")
        pytest.skip(why)
    c = NetnsCluster(tmp_path, tls=request.param == "mtls")
    if c.ca_file:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", c.ca_file)
    try:
        c.start(TOPIC, PARTITIONS)
        yield c
    finally:
        c.stop()
