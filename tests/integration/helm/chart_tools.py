"""Helpers for the chart tests: running helm, rendering, reading the rendered objects."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "helm" / "msgstore"

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


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {[o['metadata']['name'] for o in found]}"
    return found[0]
