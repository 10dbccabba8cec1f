"""Fixtures for the chart tests: the built helm binary and rendering the chart to objects.

helm is built from its Go sources by tests/integration/controlplane/build.sh (component "helm"); asking
for the `helm_bin` fixture makes the control-plane plugin build it right after collection,
outside any per-test timeout. A failed build fails these tests, it never skips them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fixtures_controlplane
import pytest
import yaml
from chart_tools import CHART, KUBE_VERSION, UniqueKeyLoader, run_helm, set_args

fixtures_controlplane.COMPONENTS_OF_FIXTURE.setdefault("helm_bin", ("helm",))


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """The built helm; MSGSTORE_HELM may name another helm v3 binary to test against."""
    override = os.environ.get("MSGSTORE_HELM")
    if override:
        return Path(override)
    return fixtures_controlplane.require_binary("helm")


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
            "--kube-version",
            KUBE_VERSION,
            *set_args(values),
            *extra,
        )
        return [doc for doc in yaml.load_all(proc.stdout, Loader=UniqueKeyLoader) if doc]

    return _render
