"""The one list of handler modules the listener loads (each has ``register(table)``; see the
package docstring). Add a module here to serve its APIs."""

from __future__ import annotations

from storage_node.kafka import (
    api_versions,
    cluster_info,
    fetch,
    list_offsets,
    metadata,
    produce,
    sasl,
    topic_admin,
)
from storage_node.kafka.groups import deletion as group_deletion
from storage_node.kafka.groups import handlers as groups

HANDLER_MODULES = (
    api_versions,
    sasl,
    metadata,
    produce,
    fetch,
    list_offsets,
    topic_admin,
    cluster_info,
    groups,
    group_deletion,
)
