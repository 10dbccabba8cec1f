"""Fixtures shared by every test folder."""

from __future__ import annotations

import signal

# Some tests send real SIGINTs (to this process and to CLI subprocesses) and expect Python's
# KeyboardInterrupt. A test run started in the background by a non-interactive shell inherits
# SIGINT as ignored, and Python then never raises it; restore the default handler (children
# started from here get SIGINT's default disposition back at exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Control-plane binaries built from source, a real MinIO server for the S3 tier's tests, and a
# kind cluster running msgstore's own images for the end-to-end tests.
pytest_plugins = [
    "fixtures_controlplane",
    "fixtures_minio",
    "fixtures_kind",
    "fixtures_prometheus",
]
