"""Fixtures shared by every test folder, and the markers each folder's tests carry."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

# Some tests send real SIGINTs (to this process and to CLI subprocesses) and expect Python's
# KeyboardInterrupt. A test run started in the background by a non-interactive shell inherits
# SIGINT as ignored, and Python then never raises it; restore the default handler (children
# started from here get SIGINT's default disposition back at exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Control-plane binaries built from source, a real MinIO server for the S3 tier's tests, and a
# kind cluster running msgstore's own images for the end-to-end tests.
pytest_plugins = ["fixtures_controlplane", "fixtures_minio", "fixtures_kind"]

TESTS = Path(__file__).resolve().parent

# Folder (relative to tests/) -> the markers of every test under it (pyproject lists them).
# A test's marker says what it needs, so `-m` picks a suite without a marker in any file;
# `slow` stays on the tests themselves.
MARKERS_OF_FOLDER: dict[str, tuple[str, ...]] = {
    "unit": ("unit",),
    "integration": ("integration",),
    "integration/controlplane": ("integration", "k8s"),
    "integration/helm": ("integration", "k8s"),
    "integration/k8s": ("integration", "k8s"),
    "integration/images": ("integration", "images"),
    "integration/kind": ("integration", "kind"),
    "integration/s3": ("integration", "s3"),
    "integration/spark": ("integration", "spark"),
    "e2e": ("e2e",),
}


def markers_for(path: Path) -> tuple[str, ...]:
    """The markers of the deepest folder in MARKERS_OF_FOLDER that holds `path`."""
    try:
        parts = path.resolve().relative_to(TESTS).parts[:-1]
    except ValueError:
        return ()
    for depth in range(len(parts), 0, -1):
        found = MARKERS_OF_FOLDER.get("/".join(parts[:depth]))
        if found is not None:
            return found
    return ()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test by its folder, before `-m` selects (tryfirst)."""
    for item in items:
        for name in markers_for(Path(item.path)):
            item.add_marker(name)
