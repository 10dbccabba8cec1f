"""Object metadata shared by every child: name, namespace, labels, owner reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import API_VERSION, KIND, naming


@dataclass(frozen=True)
class Owner:
    """The MessageStore that owns the children (its uid makes garbage collection work)."""

    name: str
    namespace: str
    uid: str


def owner_reference(owner: Owner) -> dict[str, Any]:
    """Controller reference: deleting the MessageStore deletes the child (garbage collector)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": owner.name,
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(owner: Owner, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": naming.common_labels(owner.name, component),
        "ownerReferences": [owner_reference(owner)],
    }
