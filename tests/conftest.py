"""Fixtures shared by every test folder."""

from __future__ import annotations

import socket

import pytest

# Control-plane binaries built from source, and a real MinIO server for the S3 tier's tests.
pytest_plugins = ["fixtures_controlplane", "fixtures_minio"]


def pick_free_port() -> int:
    """A loopback port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def free_port() -> int:
    return pick_free_port()
