"""The partition service: the one path from a request to the store serving a partition.

Every front end (the HTTP routes, a Kafka listener) asks ``PartitionService`` which store
serves (topic, partition) on this node; it answers the store or raises ``NotLeader``
(another node leads the partition's log) or ``Unavailable`` (recovering). A node without
replicated logs hosts one log of factor 1 (``SingleLog``) behind the same interface
(``LogSet``) as a replicated node's ``LogHost``. Modules: ``log_set`` (the interface),
``single_log``, ``routing_view`` (what the service reads of the routing table),
``write_gate`` (draining, free disk), ``append_events`` (long-poll wake-ups), ``merge``
(combining answers of several logs) and ``service``. Layer: above the store, wire and
replication; below the server and every other front end.
"""

from storage_node.partitions.log_set import LogSet
from storage_node.partitions.service import AppendDone, PartitionService
from storage_node.partitions.single_log import SingleLog

__all__ = ["AppendDone", "LogSet", "PartitionService", "SingleLog"]
