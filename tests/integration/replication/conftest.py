"""A fresh netns cluster per test (skipped where namespaces cannot be made)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.replication.netns_cluster import NetnsCluster, netns_available
from tests.integration.replication.workload import PARTITIONS, TOPIC


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NetnsCluster]:
    why = netns_available()
    if why is not None:
        if os.geteuid() == 0:  # root can make namespaces: a missing tool is a broken setup
            pytest.fail(f"network namespaces unavailable as root: {why}")
        pytest.skip(why)
    c = NetnsCluster(tmp_path)
    try:
        c.start(TOPIC, PARTITIONS)
        yield c
    finally:
        c.stop()
