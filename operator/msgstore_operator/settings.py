"""Node settings as MSGSTORE_* environment variables (names in docs/CONFIG.md).

They go into the ``<name>-config`` ConfigMap that every node pod loads with ``envFrom``; a
hash of them is put on the pod template so that a changed setting rolls the pods (a
ConfigMap change alone would not restart anything).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from . import naming
from .spec import StoreSpec

SPARK_OWNS_COMPACTION_S = 10 * 365 * 24 * 3600


def _num(value: float) -> str:
    """Numbers as the shortest text that parses back to the same value."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def node_settings(spec: StoreSpec) -> dict[str, str]:
    """Every setting the node reads from its environment, as strings."""
    env = {
        "MSGSTORE_DATA_DIR": naming.DATA_DIR,
        "MSGSTORE_HOST": "0.0.0.0",
        "MSGSTORE_PORT": str(spec.port),
        "MSGSTORE_ROUTING_FILE": naming.ROUTING_FILE,
        # Users and ACLs come from MessageStoreUser resources (the mounted <store>-access
        # Secret); the nodes' own user API refuses changes (409) that the next write undoes.
        "MSGSTORE_ACCESS_FILE": naming.ACCESS_FILE,
        "MSGSTORE_ACCESS_MANAGED": "true",
        "MSGSTORE_FLUSH_MODE": spec.flush.mode,
        "MSGSTORE_FLUSH_MAX_AGE_MS": str(spec.flush.max_age_ms),
        "MSGSTORE_FLUSH_MAX_MESSAGES": str(spec.flush.max_messages),
        "MSGSTORE_FLUSH_MAX_BYTES": str(spec.flush.max_bytes),
        "MSGSTORE_SEGMENT_BYTES": str(spec.segment_bytes),
        "MSGSTORE_INDEX_SLOTS": str(spec.index_slots),
        "MSGSTORE_INDEX_ITEMS": str(spec.index_items),
        "MSGSTORE_DEFAULT_RETENTION_HOURS": _num(spec.retention_hours),
    }
    if spec.kafka.enabled:  # the listeners' advertised addresses are per pod (statefulset.py)
        env["MSGSTORE_KAFKA_PORT"] = str(spec.kafka.port)
        if spec.external.kafka_node_port_base is not None and spec.external.enabled:
            env["MSGSTORE_KAFKA_EXTERNAL_PORT"] = str(spec.kafka.external_port)
    if spec.compaction.mode == "spark":
        # The Spark job compacts sealed files; nodes leave them alone (ten years).
        env["MSGSTORE_COMPACT_AFTER_S"] = str(SPARK_OWNS_COMPACTION_S)
    if spec.tiering.enabled and spec.tiering.url:
        env["MSGSTORE_OBJECT_STORE_URL"] = spec.tiering.url
        env["MSGSTORE_UPLOAD_AFTER_S"] = _num(spec.tiering.upload_after_hours * 3600)
        if spec.tiering.endpoint:
            env["AWS_ENDPOINT_URL"] = spec.tiering.endpoint
    return env


def config_hash(settings: Mapping[str, str], extra: Mapping[str, object] | None = None) -> str:
    """Short stable digest of the settings (and anything else that needs a restart)."""
    blob = json.dumps({"settings": dict(settings), "extra": dict(extra or {})}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
