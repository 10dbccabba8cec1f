"""Builds (or reuses) the control-plane binaries before the tests that need them run.

The binaries come from tests/integration/controlplane/build.sh, which compiles them from Go sources. A cold
build takes far longer than the per-test timeout, so it runs once right after collection, and
only when a collected test uses a fixture that needs it. A failed build never skips anything:
every test that needs the binaries fails with the build's own error message.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

BUILD_SCRIPT = Path(__file__).resolve().parent / "integration" / "controlplane" / "build.sh"

# Which build.sh components each fixture needs, and which component makes each binary.
COMPONENTS_OF_FIXTURE = {
    "k8s_cluster": ("kubernetes", "etcd", "kwok", "helm"),
    "minio_server": ("minio",),
}
COMPONENT_OF_BINARY = {
    "kube-apiserver": "kubernetes",
    "kube-controller-manager": "kubernetes",
    "kube-scheduler": "kubernetes",
    "kubectl": "kubernetes",
    "etcd": "etcd",
    "kwok": "kwok",
    "kwokctl": "kwok",
    "helm": "helm",
    "minio": "minio",
}

# Per component: the binary directory once built, or the build's error message.
_built: dict[str, Path] = {}
_failed: dict[str, str] = {}


class ControlPlaneBuildError(RuntimeError):
    """The control-plane binaries could not be built; the message says why."""


def _run_build(components: list[str]) -> Path:
    """Runs build.sh, streaming its progress to stderr; returns the binary directory."""
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", str(BUILD_SCRIPT), *components],
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
            f"{BUILD_SCRIPT.name} {' '.join(components)} exited with status {code} after "
            f"{time.monotonic() - started:.0f}s:\n{tail}"
        )
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines or not Path(lines[-1]).is_dir():
        raise ControlPlaneBuildError(f"{BUILD_SCRIPT.name} did not print its binary directory")
    return Path(lines[-1])


def ensure_built(components: Iterable[str]) -> Path:
    """Builds the components not built yet in this process; remembers failures."""
    wanted = sorted(set(components))
    for component in wanted:
        if component in _failed:
            raise ControlPlaneBuildError(_failed[component])
    missing = [c for c in wanted if c not in _built]
    if missing:
        try:
            bin_dir = _run_build(missing)
        except (ControlPlaneBuildError, OSError) as exc:
            for component in missing:
                _failed[component] = str(exc)
            raise ControlPlaneBuildError(str(exc)) from exc
        _built.update(dict.fromkeys(missing, bin_dir))
    return _built[wanted[0]]


def require_binary(name: str) -> Path:
    """Path of one built binary, or a test failure (never a skip) explaining what is missing."""
    try:
        path = ensure_built([COMPONENT_OF_BINARY[name]]) / name
    except ControlPlaneBuildError as exc:
        reason = str(exc)
    else:
        reason = ""
    if reason:
        pytest.fail(f"the test control plane could not be built:\n{reason}", pytrace=False)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing after the control-plane build", pytrace=False)
    return path


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list
) -> None:
    """Builds, before the first test, what the selected tests need (after -m/-k deselection)."""
    if config.option.collectonly:
        return
    needed: set[str] = set()
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            needed.update(COMPONENTS_OF_FIXTURE.get(fixture, ()))
    if needed:
        try:
            ensure_built(needed)
        except ControlPlaneBuildError:
            pass  # reported by every test that needs the binaries
