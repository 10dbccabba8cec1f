"""Helpers for the chart tests: the built helm binary and rendering the chart to objects.

helm is built from its Go sources by tests/controlplane/build.sh (component "helm"); asking
for the `helm_bin` fixture makes the control-plane plugin build it right after collection,
outside any per-test timeout. A failed build fails these tests, it never skips them.
"""

from __future__ import annotations

import os
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


# The version of the test control plane; `helm template` has no cluster to ask.
KUBE_VERSION = "1.36.3"


class UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate keys (the API server would keep only one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class HelmFailed(AssertionError):
    """helm exited non-zero; the message carries its output."""


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """The built helm; MSGSTORE_HELM may name another helm v3 binary to test against."""
    override = os.environ.get("MSGSTORE_HELM")
    if override:
        return Path(override)
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
            "--kube-version",
            KUBE_VERSION,
            *set_args(values),
            *extra,
        )
        return [doc for doc in yaml.load_all(proc.stdout, Loader=UniqueKeyLoader) if doc]

    return _render


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {[o['metadata']['name'] for o in found]}"
    return found[0]
