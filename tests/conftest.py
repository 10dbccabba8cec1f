"""Fixtures shared by every test folder."""

from __future__ import annotations

# Control-plane binaries built from source, and a real MinIO server for the S3 tier's tests.
pytest_plugins = ["fixtures_controlplane", "fixtures_minio"]
