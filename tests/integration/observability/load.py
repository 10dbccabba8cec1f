"""A small load on a running cluster that gives every metric family a series: a topic with
keyed messages, a consumer group that read part of it, and another that committed nothing
past the start (a lagging group)."""

from __future__ import annotations

from storage_node.client import Client

TOPIC = "orders"
PARTITIONS = 4
LAGGING_GROUP = "slow-readers"
CAUGHT_UP_GROUP = "billing"


def produce_and_commit(addresses: list[str], ca: str | None = None, messages: int = 400) -> None:
    """Produce ``messages`` keyed messages; ``billing`` commits every partition's end and
    ``slow-readers`` commits offset 1 (so it lags by the rest)."""
    with Client(addresses, ca=ca) as client:
        client.create_topic(TOPIC, PARTITIONS)
        for start in range(0, messages, 100):
            batch = [{"key": f"k{i}", "value": f"order {i}"} for i in range(start, start + 100)]
            client.produce(TOPIC, batch)
        commit_ends(addresses, ca)
        for p in range(PARTITIONS):
            client.commit_offset(LAGGING_GROUP, TOPIC, p, 1)
        client.read(TOPIC, 0, offset=0, max_messages=10)


def commit_ends(addresses: list[str], ca: str | None = None) -> None:
    """``billing`` commits the next offset of every partition (it is caught up)."""
    with Client(addresses, ca=ca) as client:
        offsets = client.describe_topic(TOPIC)["partition_offsets"]
        for p in offsets:
            client.commit_offset(CAUGHT_UP_GROUP, TOPIC, p["partition"], p["next_offset"])
