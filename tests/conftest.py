"""Fixtures shared by every test folder."""

from __future__ import annotations

import pytest

from storage_node.local import free_port as loopback_port

# Control-plane binaries built from source, and a real MinIO server for the S3 tier's tests.
pytest_plugins = ["fixtures_controlplane", "fixtures_minio"]


def pick_free_port() -> int:
    """A loopback port that was free a moment ago (see ``storage_node.local.free_port``)."""
    return loopback_port()


@pytest.fixture
def free_port() -> int:
    return pick_free_port()
