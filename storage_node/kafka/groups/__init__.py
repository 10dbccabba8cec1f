"""Kafka consumer groups (the classic protocol) on a msgstore node.

``group`` (a group's members and the protocol's data types), ``coordinator`` (the state
machine, pure, with an injected clock), ``placement`` (which node coordinates a group),
``offsets`` (committed offsets through the stores, the same ones ``msgstore group`` reads),
``node_groups`` (one node's coordinator, offsets and checks) and ``handlers`` (the Kafka
APIs over them, registered in ``storage_node.kafka.apis``).
"""
