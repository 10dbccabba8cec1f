"""PodDisruptionBudget: voluntary evictions (node drains) take one storage node at a time."""

from __future__ import annotations

from typing import Any

from .. import naming
from .meta import Owner, object_meta


def build_pdb(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(owner, naming.pdb_name(owner.name), "node"),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": naming.selector_labels(owner.name)},
        },
    }
