"""Builds (or reuses) the control-plane binaries before the tests that need them run.

The binaries come from tests/integration/controlplane/build.sh, which compiles them from Go
sources. A cold build takes far longer than the per-test timeout, so it starts right after
collection, only when a collected test uses a fixture that needs it, and runs in the background
while the tests that need no build run first (tests/conftest.py orders them so). A test that
needs the binaries waits for the build before its own timeout starts. A failed build never
skips anything: every test that needs the binaries fails with the build's own error message.
Background builds write their progress to BUILD_LOG, not between the test results.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

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
_build_lock = threading.Lock()  # one build.sh at a time, whoever asks

# Builds started after collection: name -> thread; and how long each took and tests waited.
# (MSGSTORE_TEST_BUILD_LOG names another file: scripts/test.sh gives each pytest process its own.)
BUILD_LOG = Path(
    os.environ.get("MSGSTORE_TEST_BUILD_LOG")
    or Path(tempfile.gettempdir()) / "msgstore-test-builds.log"
)
_background: dict[str, threading.Thread] = {}
BUILD_TIMES: dict[str, float] = {}
_log_lock = threading.Lock()


def echo(tag: str, line: str) -> None:
    """A build's progress line: in BUILD_LOG once builds run in the background (between the
    test results it would land in whichever test's captured output), else on stderr."""
    if _background:
        with _log_lock, open(BUILD_LOG, "a") as log:
            log.write(f"[{tag}] {line}")
    else:
        sys.stderr.write(f"[{tag}] {line}")


def start_in_background(name: str, work: Callable[[], Any]) -> None:
    """Runs `work` in a thread named `name`; `wait_for(name)` joins it. Errors are the work's
    own to record (ensure_built and the kind preparation keep them for the tests)."""
    if name in _background:
        return
    if not _background:
        BUILD_LOG.write_text("")
        sys.stderr.write(f"[builds] started in the background; progress in {BUILD_LOG}\n")

    def timed() -> None:
        started = time.monotonic()
        try:
            work()
        finally:
            BUILD_TIMES[f"{name} build"] = round(time.monotonic() - started, 1)

    thread = threading.Thread(target=timed, name=f"build-{name}", daemon=True)
    _background[name] = thread
    thread.start()


def wait_for(name: str) -> None:
    """Until the background build `name` (if one was started) has finished."""
    thread = _background.get(name)
    if thread is None or not thread.is_alive():
        return
    started = time.monotonic()
    thread.join()
    key = f"tests waited for {name}"
    BUILD_TIMES[key] = round(BUILD_TIMES.get(key, 0.0) + time.monotonic() - started, 1)


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
        echo("controlplane", line)
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
    with _build_lock:
        return _ensure_built(wanted)


def _ensure_built(wanted: list[str]) -> Path:
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


def needs_binaries(item: pytest.Item) -> bool:
    """Whether a test uses a fixture that needs control-plane binaries."""
    return any(f in COMPONENTS_OF_FIXTURE for f in getattr(item, "fixturenames", ()))


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
    """Starts building what the selected tests need (after -m/-k deselection)."""
    if config.option.collectonly:
        return
    needed: set[str] = set()
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            needed.update(COMPONENTS_OF_FIXTURE.get(fixture, ()))
    if needed:

        def build() -> None:
            try:
                ensure_built(needed)
            except ControlPlaneBuildError:
                pass  # reported by every test that needs the binaries

        start_in_background("controlplane", build)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test that needs the binaries waits for their build here, before its timeout starts."""
    if needs_binaries(item):
        wait_for("controlplane")
    yield


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if BUILD_TIMES:
        terminalreporter.write_line(f"background builds (s): {BUILD_TIMES}; log: {BUILD_LOG}")
