"""Prometheus and promtool, built from their Go module by
tests/integration/observability/build.sh (cached by version), for the tests that use the
``prometheus_bin_dir`` fixture. A cold build takes longer than the per-test timeout, so it runs
once right after collection, only when a selected test needs it. A failed build never skips a
test: each test that needs the binaries fails with the build's message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BUILD_SCRIPT = Path(__file__).resolve().parent / "integration" / "observability" / "build.sh"
FIXTURE = "prometheus_bin_dir"
_result: dict[str, Path | str] = {}


def _build() -> Path | str:
    """The binary directory, or the build's error message. MSGSTORE_PROMETHEUS_BIN_DIR may
    name another directory holding both binaries to test with."""
    override = os.environ.get("MSGSTORE_PROMETHEUS_BIN_DIR")
    if override:
        return Path(override)
    if "bin" not in _result:
        proc = subprocess.Popen(
            ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        lines: list[str] = []
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            sys.stderr.write(f"[prometheus] {line}")
        out = proc.stdout.read() if proc.stdout else ""
        last = out.strip().splitlines()[-1] if out.strip() else ""
        if proc.wait() != 0 or not Path(last).is_dir():
            _result["bin"] = f"{BUILD_SCRIPT.name} failed:\n" + "".join(lines[-40:])
        else:
            _result["bin"] = Path(last)
    return _result["bin"]


@pytest.fixture(scope="session")
def prometheus_bin_dir() -> Path:
    """The directory holding ``prometheus`` and ``promtool``."""
    built = _build()
    if isinstance(built, str):
        pytest.fail(built, pytrace=False)
    return built


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list
) -> None:
    """Build before the first test when a selected test needs the binaries."""
    if config.option.collectonly:
        return
    if any(FIXTURE in getattr(item, "fixturenames", ()) for item in items):
        _build()
