"""Parse and check the data source options, Kafka-connector style, before any work starts.

Every check runs on the driver, so a bad option fails the query at once with a message that
names it, and nothing is read or written.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from msgstore_spark.errors import OptionError
from storage_node.formats.limits import MAX_PARTITIONS, MAX_READ_MESSAGES
from storage_node.formats.names import is_valid_name

EARLIEST = -2  # Kafka's JSON convention inside startingOffsets / endingOffsets
LATEST = -1
MAX_FETCH = MAX_READ_MESSAGES  # the node's largest page

# per topic, per partition: an offset, EARLIEST or LATEST (or a timestamp in ms)
OffsetSpec = dict[str, dict[int, int]]


def _get(options: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = options.get(name)
        if value is not None and str(value).strip() != "":
            return str(value).strip()
    return None


def _int(options: Mapping[str, str], name: str, default: int | None, low: int, high: int) -> int:
    raw = _get(options, name)
    if raw is None:
        if default is None:
            raise OptionError(name, "is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(name, f"must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise OptionError(name, f"must be between {low} and {high}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise OptionError(name, f"must be true or false, got {raw!r}")


def parse_endpoints(raw: str | None, scheme: str = "http") -> list[str]:
    if raw is None:
        raise OptionError(
            "endpoints", "is required: comma-separated node URLs like http://host:port"
        )
    out = []
    for part in raw.split(","):
        part = part.strip().rstrip("/")
        if not part:
            continue
        if "://" not in part:
            part = f"{scheme}://{part}"
        if not re.match(r"^https?://[^/\s]+$", part):
            raise OptionError("endpoints", f"{part!r} is not a node URL like http://host:port")
        out.append(part)
    if not out:
        raise OptionError("endpoints", "names no node")
    return out


def check_topic_name(name: str, option: str) -> str:
    if not is_valid_name(name):
        raise OptionError(option, f"{name!r} is not a valid topic name ([A-Za-z0-9._-]{{1,200}})")
    return name


def parse_topics(options: Mapping[str, str]) -> list[str]:
    single = _get(options, "topic")
    many = _get(options, "topics", "subscribe")
    if (single is None) == (many is None):
        raise OptionError("topic", "give exactly one of 'topic' or 'topics' (comma-separated)")
    if single is not None:
        return [check_topic_name(single, "topic")]
    assert many is not None
    names = [t.strip() for t in many.split(",") if t.strip()]
    if not names:
        raise OptionError("topics", "names no topic")
    return [check_topic_name(t, "topics") for t in dict.fromkeys(names)]


def parse_offset_spec(name: str, raw: str, topics: list[str], allow_earliest: bool) -> OffsetSpec:
    """'earliest' | 'latest' | {"topic": {"0": 23, "1": -2}} (-2 earliest, -1 latest)."""
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        if word == "earliest" and not allow_earliest:
            raise OptionError(name, "'earliest' is not allowed here; use 'latest' or JSON offsets")
        value = EARLIEST if word == "earliest" else LATEST
        return {t: {-1: value} for t in topics}  # -1: every partition
    try:
        doc = json.loads(raw)
    except ValueError:
        raise OptionError(
            name, f"must be 'earliest', 'latest' or JSON like {{\"{topics[0]}\": {{\"0\": 5}}}}"
        ) from None
    return _per_partition_json(name, doc, topics, EARLIEST if allow_earliest else LATEST)


def _per_partition_json(name: str, doc: object, topics: list[str], low: int) -> OffsetSpec:
    if not isinstance(doc, dict):
        raise OptionError(name, "JSON must map topic names to {partition: value}")
    spec: OffsetSpec = {}
    for topic, parts in doc.items():
        if topic not in topics:
            raise OptionError(name, f"names topic {topic!r}, which this query does not read")
        if not isinstance(parts, dict):
            raise OptionError(name, f"value for topic {topic!r} must be an object")
        spec[topic] = {}
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise OptionError(name, f"partition {p!r} of {topic!r} is not a number") from None
            if partition < 0:
                raise OptionError(name, f"partition {partition} of {topic!r} is negative")
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise OptionError(
                    name, f"value for {topic!r} partition {partition} must be an integer >= {low}"
                )
            spec[topic][partition] = value
    return spec


def parse_timestamp_spec(name: str, raw: str, topics: list[str]) -> OffsetSpec:
    """A single ms timestamp for every partition, or Kafka's per-partition JSON."""
    raw = raw.strip()
    if re.fullmatch(r"\d+", raw):
        return {t: {-1: int(raw)} for t in topics}
    try:
        doc = json.loads(raw)
    except ValueError:
        raise OptionError(name, f"must be milliseconds since the epoch, got {raw!r}") from None
    return _per_partition_json(name, doc, topics, 0)


@dataclass(frozen=True)
class ConnectionOptions:
    endpoints: list[str]
    token: str | None
    timeout_s: float
    # CA certificate file the nodes' TLS certificates must verify against (the same path on
    # the driver and every executor, e.g. the mounted <store>-ca ConfigMap).
    ca: str | None = None


@dataclass(frozen=True)
class ReadOptions:
    conn: ConnectionOptions
    topics: list[str]
    starting: OffsetSpec
    ending: OffsetSpec
    starting_ts: OffsetSpec | None
    ending_ts: OffsetSpec | None
    max_records_per_partition: int
    fetch_size: int
    min_records_per_task: int
    tag: str | None
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    starting_given: bool = field(default=False)


@dataclass(frozen=True)
class WriteOptions:
    conn: ConnectionOptions
    topic: str
    create_partitions: int | None
    compression: str
    batch_size: int
    max_batch_bytes: int


def connection_options(options: Mapping[str, str]) -> ConnectionOptions:
    ca = _get(options, "ca") or os.environ.get("MSGSTORE_CA") or None
    # A bare host:port means https when a CA is set.
    endpoints = parse_endpoints(_get(options, "endpoints", "endpoint"), "https" if ca else "http")
    token = _get(options, "token") or os.environ.get("MSGSTORE_TOKEN") or None
    timeout = _int(options, "timeoutSeconds", 60, 1, 3600)
    if ca is not None:
        if not os.path.isfile(ca):
            raise OptionError("ca", f"CA file {ca!r} does not exist (option 'ca' or MSGSTORE_CA)")
        plain = [e for e in endpoints if e.startswith("http://")]
        if plain:
            raise OptionError(
                "endpoints",
                f"{plain[0]!r} is plain http but a CA is set: use https:// so the token "
                "is never sent in clear",
            )
    return ConnectionOptions(endpoints, token, float(timeout), ca)


def read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    conn = connection_options(options)
    topics = parse_topics(options)
    raw_start = _get(options, "startingOffsets")
    default_start = "latest" if streaming else "earliest"
    starting = parse_offset_spec("startingOffsets", raw_start or default_start, topics, True)
    raw_end = _get(options, "endingOffsets")
    if streaming and raw_end is not None:
        raise OptionError("endingOffsets", "is for batch queries only (a stream has no end)")
    ending = parse_offset_spec("endingOffsets", raw_end or "latest", topics, False)
    starting_ts = ending_ts = None
    raw = _get(options, "startingTimestamp")
    if raw is not None:
        starting_ts = parse_timestamp_spec("startingTimestamp", raw, topics)
    elif (raw := _get(options, "startingOffsetsByTimestamp")) is not None:
        starting_ts = parse_timestamp_spec("startingOffsetsByTimestamp", raw, topics)
    raw = _get(options, "endingTimestamp")
    if raw is not None:
        ending_ts = parse_timestamp_spec("endingTimestamp", raw, topics)
    elif (raw := _get(options, "endingOffsetsByTimestamp")) is not None:
        ending_ts = parse_timestamp_spec("endingOffsetsByTimestamp", raw, topics)
    if streaming and ending_ts is not None:
        raise OptionError("endingTimestamp", "is for batch queries only (a stream has no end)")
    per_trigger = _get(options, "maxOffsetsPerTrigger")
    return ReadOptions(
        conn=conn,
        topics=topics,
        starting=starting,
        ending=ending,
        starting_ts=starting_ts,
        ending_ts=ending_ts,
        max_records_per_partition=_int(options, "maxRecordsPerPartition", 1_000_000, 1, 2**62),
        fetch_size=_int(options, "fetchSize", MAX_FETCH, 1, MAX_FETCH),
        min_records_per_task=_int(options, "minRecordsPerTask", 100_000, 1, 2**62),
        tag=_get(options, "tag"),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        max_offsets_per_trigger=(
            None if per_trigger is None else _int(options, "maxOffsetsPerTrigger", None, 1, 2**62)
        ),
        starting_given=raw_start is not None or starting_ts is not None,
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    conn = connection_options(options)
    if _get(options, "topics", "subscribe") is not None:
        raise OptionError("topics", "a write goes to one topic: use the 'topic' option")
    topic = _get(options, "topic")
    if topic is None:
        raise OptionError("topic", "is required for writes")
    check_topic_name(topic, "topic")
    raw_parts = _get(options, "partitions")
    partitions = None if raw_parts is None else _int(options, "partitions", None, 1, MAX_PARTITIONS)
    compression = (_get(options, "compression") or "lz4").lower()
    if compression not in ("lz4", "none"):
        raise OptionError("compression", f"must be 'lz4' or 'none', got {compression!r}")
    return WriteOptions(
        conn=conn,
        topic=topic,
        create_partitions=partitions,
        compression=compression,
        batch_size=_int(options, "batchSize", 10_000, 1, 100_000),
        max_batch_bytes=_int(options, "maxBatchBytes", 16 * 1024 * 1024, 1024, 60 * 1024 * 1024),
    )
