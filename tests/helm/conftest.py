"""Helpers for the chart tests: the built helm binary and rendering the chart to objects.

helm is built from its Go sources by tests/controlplane/build.sh (component "helm"); asking
for the `helm_bin` fixture makes the control-plane plugin build it right after collection,
outside any per-test timeout. A failed build fails these tests, it never skips them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fixtures_controlplane
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "msgstore"

fixtures_controlplane.COMPONENTS_OF_FIXTURE.setdefault("helm_bin", ("helm",))


class HelmFailed(AssertionError):
    """helm exited non-zero; the message carries its output."""


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    return fixtures_controlplane.require_binary("helm")


def run_helm(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise HelmFailed(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def set_args(values: dict[str, str] | None) -> list[str]:
    out: list[str] = []
    for key, value in (values or {}).items():
        out += ["--set", f"{key}={value}"]
    return out


@pytest.fixture(scope="session")
def render(helm_bin: Path) -> Callable[..., list[dict[str, Any]]]:
    """`helm template` the chart with --set values; returns the rendered objects."""

    def _render(
        values: dict[str, str] | None = None,
        *extra: str,
        namespace: str = "msgstore-system",
        release: str = "ms",
    ) -> list[dict[str, Any]]:
        proc = run_helm(
            helm_bin,
            "template",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--include-crds",
            *set_args(values),
            *extra,
        )
        return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]

    return _render


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {[o['metadata']['name'] for o in found]}"
    return found[0]
