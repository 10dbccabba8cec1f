"""Builds (or reuses) the control-plane binaries before the tests that need them run.

The binaries come from tests/controlplane/build.sh, which compiles them from Go sources. A cold
build takes far longer than the per-test timeout, so it runs once right after collection, and
only when a collected test uses a fixture that needs it. A failed build never skips anything:
every test that needs the binaries fails with the build's own error message.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUILD_SCRIPT = Path(__file__).resolve().parent / "controlplane" / "build.sh"
FIXTURES_NEEDING_BINARIES = frozenset({"k8s_cluster", "minio_server"})

_bin_dir: Path | None = None
_build_error: str | None = None


class ControlPlaneBuildError(RuntimeError):
    """The control-plane binaries could not be built; the message says why."""


def _run_build() -> Path:
    """Runs build.sh, streaming its progress to stderr; returns the binary directory."""
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr_lines: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        stderr_lines.append(line)
        sys.stderr.write(f"[controlplane] {line}")
    stdout = proc.stdout.read() if proc.stdout else ""
    code = proc.wait()
    if code != 0:
        tail = "".join(stderr_lines[-60:])
        raise ControlPlaneBuildError(
            f"{BUILD_SCRIPT.name} exited with status {code} after "
            f"{time.monotonic() - started:.0f}s:\n{tail}"
        )
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines or not Path(lines[-1]).is_dir():
        raise ControlPlaneBuildError(f"{BUILD_SCRIPT.name} did not print its binary directory")
    return Path(lines[-1])


def controlplane_bin_dir() -> Path:
    """The directory with every built binary; builds once per process, remembers failures."""
    global _bin_dir, _build_error
    if _bin_dir is not None:
        return _bin_dir
    if _build_error is not None:
        raise ControlPlaneBuildError(_build_error)
    try:
        _bin_dir = _run_build()
    except (ControlPlaneBuildError, OSError) as exc:
        _build_error = str(exc)
        raise ControlPlaneBuildError(_build_error) from exc
    return _bin_dir


def require_binary(name: str) -> Path:
    """Path of one built binary, or a test failure (never a skip) explaining what is missing."""
    try:
        path = controlplane_bin_dir() / name
    except ControlPlaneBuildError as exc:
        pytest.fail(f"the test control plane could not be built:\n{exc}", pytrace=False)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing after the control-plane build", pytrace=False)
    return path


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list
) -> None:
    """Builds before the first test when any selected test needs the binaries."""
    if config.option.collectonly:
        return
    if any(FIXTURES_NEEDING_BINARIES.intersection(getattr(i, "fixturenames", ())) for i in items):
        try:
            controlplane_bin_dir()
        except ControlPlaneBuildError:
            pass  # reported by every test that needs the binaries
