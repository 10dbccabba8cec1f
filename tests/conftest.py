"""Fixtures shared by every test folder."""

from __future__ import annotations

# Control-plane binaries built from source, a real MinIO server for the S3 tier's tests, and a
# kind cluster running msgstore's own images for the end-to-end tests.
pytest_plugins = ["fixtures_controlplane", "fixtures_minio", "fixtures_kind"]
