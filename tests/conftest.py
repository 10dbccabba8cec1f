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
pytest_plugins = [
    "fixtures_controlplane",
    "fixtures_minio",
    "fixtures_kind",
    "fixtures_prometheus",
]

TESTS = Path(__file__).resolve().parent

# Folder (relative to tests/) -> the markers of every test under it (pyproject lists them).
# A test's marker says what it needs, so `-m` picks a suite without a marker in any file;
# `slow` stays on the tests themselves.
MARKERS_OF_FOLDER: dict[str, tuple[str, ...]] = {
    "unit": ("unit",),
    "integration": ("integration",),
    "integration/cli": ("integration", "cli"),
    "integration/controlplane": ("integration", "k8s"),
    "integration/helm": ("integration", "k8s"),
    "integration/k8s": ("integration", "k8s"),
    "integration/kafka": ("integration", "kafka"),
    "integration/console": ("integration", "console"),
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


def build_stage(item: pytest.Item) -> int:
    """When a test can run: 0 needs no build; 1 needs the control-plane or Prometheus
    binaries; 2 the kind preparation (engine, node image, msgstore images); 3 the kind cluster
    itself."""
    import fixtures_controlplane  # loaded by pytest_plugins; imported here, once they are
    import fixtures_prometheus

    names = set(getattr(item, "fixturenames", ()))
    if "kind_cluster" in names:
        return 3
    if "kind_prepared" in names or item.get_closest_marker("images"):
        return 2
    if names & {*fixtures_controlplane.COMPONENTS_OF_FIXTURE, fixtures_prometheus.FIXTURE}:
        return 1
    return 0


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test by its folder, before `-m` selects (tryfirst); then orders the tests
    so that those needing no build run first, while the builds they would wait for run in the
    background (fixtures_controlplane.py, fixtures_kind.py). A module moves as a whole, so its
    module-scoped fixtures are set up once; the order within a stage is kept."""
    for item in items:
        for name in markers_for(Path(item.path)):
            item.add_marker(name)
    stage_of_module: dict[Path, int] = {}
    for item in items:
        path = Path(item.path)
        stage_of_module[path] = max(stage_of_module.get(path, 0), build_stage(item))
    items.sort(key=lambda item: stage_of_module[Path(item.path)])  # stable
