"""Driver-side view of the cluster: connect, describe topics, turn offset options into ranges."""

from __future__ import annotations

from dataclasses import dataclass

from msgstore_spark.errors import OptionError, explained
from msgstore_spark.options import EARLIEST, LATEST, ConnectionOptions, OffsetSpec, ReadOptions
from storage_node.client import Client
from storage_node.errors import Unavailable, UnknownTopic


def connect(conn: ConnectionOptions, producer_id: str | None = None) -> Client:
    return Client(
        conn.endpoints,
        token=conn.token,
        timeout=conn.timeout_s,
        producer_id=producer_id,
        ca=conn.ca or "",
    )


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    first_offset: int
    next_offset: int
    owner_address: str | None


def describe(client: Client, conn: ConnectionOptions, topic: str) -> list[PartitionState]:
    """Offsets and owners of every partition; an unreachable owner is an error naming it."""
    with explained(conn.endpoints, topic):
        doc = client.describe_topic(topic)
    down = doc.get("unreachable_nodes") or []
    if down:
        raise Unavailable(
            f"msgstore nodes {', '.join(down)} (owners of partitions of topic {topic!r}) did "
            f"not answer; check they run (option 'endpoints' = {','.join(conn.endpoints)})"
        )
    return [
        PartitionState(
            topic,
            int(p["partition"]),
            int(p["first_offset"]),
            int(p["next_offset"]),
            p.get("owner_address"),
        )
        for p in doc["partition_offsets"]
    ]


def describe_all(client: Client, opts: ReadOptions) -> dict[str, list[PartitionState]]:
    return {t: describe(client, opts.conn, t) for t in opts.topics}


def offset_for_time(client: Client, state: PartitionState, ts_ms: int) -> int:
    """First offset stored at or after ``ts_ms`` (the partition's end if none)."""
    doc = client.read(state.topic, state.partition, max_messages=1, start_time=ts_ms)
    if doc["messages"]:
        return int(doc["messages"][0]["offset"])
    return int(doc["next_offset"])


def _lookup(spec: OffsetSpec | None, state: PartitionState) -> int | None:
    if spec is None or state.topic not in spec:
        return None
    parts = spec[state.topic]
    if state.partition in parts:
        return parts[state.partition]
    return parts.get(-1)


def check_spec_partitions(name: str, spec: OffsetSpec | None, layout: dict) -> None:
    """A JSON option naming a partition the topic does not have is a mistake, not a no-op."""
    for topic, parts in (spec or {}).items():
        count = len(layout[topic])
        bad = [p for p in parts if p >= count]
        if bad:
            raise OptionError(
                name, f"topic {topic!r} has {count} partitions; partition {bad[0]} does not exist"
            )


def resolve_start(
    client: Client, opts: ReadOptions, state: PartitionState, spec: OffsetSpec
) -> int:
    ts = _lookup(opts.starting_ts, state)
    if ts is not None:
        return offset_for_time(client, state, ts)
    value = _lookup(spec, state)
    if value is None:
        value = EARLIEST  # a JSON spec that leaves a partition out reads all of it
    if value == EARLIEST:
        return state.first_offset
    if value == LATEST:
        return state.next_offset
    if value > state.next_offset:
        raise OptionError(
            "startingOffsets",
            f"offset {value} of {state.topic!r} partition {state.partition} is beyond its end "
            f"({state.next_offset})",
        )
    if value < state.first_offset:
        if opts.fail_on_data_loss:
            raise OptionError(
                "startingOffsets",
                f"offset {value} of {state.topic!r} partition {state.partition} has expired "
                f"(first offset is {state.first_offset}); set failOnDataLoss=false to skip ahead",
            )
        return state.first_offset
    return value


def resolve_end(client: Client, opts: ReadOptions, state: PartitionState) -> int:
    ts = _lookup(opts.ending_ts, state)
    if ts is not None:
        return offset_for_time(client, state, ts)
    value = _lookup(opts.ending, state)
    if value is None or value == LATEST:
        return state.next_offset
    if value > state.next_offset:
        raise OptionError(
            "endingOffsets",
            f"offset {value} of {state.topic!r} partition {state.partition} is beyond its end "
            f"({state.next_offset})",
        )
    return value


def ensure_topic(
    client: Client, conn: ConnectionOptions, topic: str, partitions: int | None, compression: str
) -> int:
    """Partition count of ``topic``; create it first when a partition count is given."""
    with explained(conn.endpoints, topic):
        try:
            return int(client.describe_topic(topic)["partitions"])
        except UnknownTopic:
            if partitions is None:
                raise UnknownTopic(
                    f"msgstore topic {topic!r} (option 'topic') does not exist; create it or "
                    "set the 'partitions' option to create it on write",
                    topic=topic,
                ) from None
        doc = client.create_topic(topic, partitions, compression=compression)
        return int(doc["partitions"])
