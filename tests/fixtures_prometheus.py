"""Prometheus and promtool, built from their Go module by
tests/integration/observability/build.sh (cached by version), for the tests that use the
``prometheus_bin_dir`` fixture. A cold build takes far longer than the per-test timeout, so it
starts right after collection, in the background, only when a selected test needs it: the
tests that need no build run meanwhile (tests/conftest.py orders them first), and a test that
needs the binaries waits for the build before its own timeout starts. A failed build never
skips a test: each test that needs the binaries fails with the build's message.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_controlplane import echo, start_in_background, wait_for

BUILD_SCRIPT = Path(__file__).resolve().parent / "integration" / "observability" / "build.sh"
FIXTURE = "prometheus_bin_dir"
BUILD = "prometheus"  # the background build's name (fixtures_controlplane.start_in_background)
_result: dict[str, Path | str] = {}
_lock = threading.Lock()


def _build() -> Path | str:
    """The binary directory, or the build's error message. MSGSTORE_PROMETHEUS_BIN_DIR may
    name another directory holding both binaries to test with."""
    override = os.environ.get("MSGSTORE_PROMETHEUS_BIN_DIR")
    if override:
        return Path(override)
    with _lock:
        if "bin" not in _result:
            _result["bin"] = _run_build()
        return _result["bin"]


def _run_build() -> Path | str:
    proc = subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        echo("prometheus", line)
    out = proc.stdout.read() if proc.stdout else ""
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if proc.wait() != 0 or not Path(last).is_dir():
        return f"{BUILD_SCRIPT.name} failed:\n" + "".join(lines[-40:])
    return Path(last)


def needs_prometheus(item: pytest.Item) -> bool:
    return FIXTURE in getattr(item, "fixturenames", ())


@pytest.fixture(scope="session")
def prometheus_bin_dir() -> Path:
    """The directory holding ``prometheus`` and ``promtool``."""
    wait_for(BUILD)
    built = _build()
    if isinstance(built, str):
        pytest.fail(built, pytrace=False)
    return built


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Starts the build when a selected test needs the binaries."""
    if config.option.collectonly:
        return
    if any(needs_prometheus(item) for item in items):
        start_in_background(BUILD, _build)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test that needs the binaries waits for their build here, before its timeout starts."""
    if needs_prometheus(item):
        wait_for(BUILD)
    yield
