"""Producer batches packed from arrays: the client's write fast path.

Messages are turned into Arrow columns once (from an Arrow table or batch, a pandas
DataFrame, a dict of columns, or a list of plain message dicts with a list comprehension per
field), partitions are chosen for the whole batch with the vectorized key hash, rows are
grouped by owning node with one stable argsort and each frame of the binary batch format
is cut from the reordered columns: no Python object per message between the caller's data
and the bytes on the wire.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage_node.client.common import RoutingCache, SequenceSource, SubBatch
from storage_node.errors import InvalidArgument
from storage_node.formats.limits import check_key
from storage_node.formats.partitioning import partitions_for_keys
from storage_node.wire.batch_codec import CONTENT_TYPE, HEADER, MAGIC

FIELDS = ("value", "key", "tag", "msg_id", "timestamp", "partition")
_PLAIN_FIELDS = frozenset(FIELDS)


@dataclass
class Columns:
    """A producer batch as Arrow arrays (``values`` binary, text fields string or None)."""

    values: pa.Array
    keys: pa.Array | None = None
    tags: pa.Array | None = None
    msg_ids: pa.Array | None = None
    timestamps: np.ndarray | None = None  # int64 ms, -1 = not given
    partitions: np.ndarray | None = None  # int64, -1 = not given

    def __len__(self) -> int:
        return len(self.values)

    def take(self, rows: np.ndarray) -> Columns:
        if (
            len(rows)
            and int(rows[-1]) - int(rows[0]) == len(rows) - 1
            and (np.diff(rows) == 1).all()
        ):
            return self.slice(int(rows[0]), len(rows))  # a run of rows: views, no copy
        index = pa.array(rows)

        def pick(arr: pa.Array | None) -> pa.Array | None:
            return None if arr is None else arr.take(index)

        return Columns(
            self.values.take(index),
            pick(self.keys),
            pick(self.tags),
            pick(self.msg_ids),
            None if self.timestamps is None else self.timestamps[rows],
            None if self.partitions is None else self.partitions[rows],
        )

    def slice(self, start: int, count: int) -> Columns:
        end = start + count

        def cut(arr: pa.Array | None) -> pa.Array | None:
            return None if arr is None else arr.slice(start, count)

        return Columns(
            self.values.slice(start, count),
            cut(self.keys),
            cut(self.tags),
            cut(self.msg_ids),
            None if self.timestamps is None else self.timestamps[start:end],
            None if self.partitions is None else self.partitions[start:end],
        )


def _text(arr: Any, name: str) -> pa.Array | None:
    if arr is None:
        return None
    try:
        out = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else pa.array(arr)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        raise InvalidArgument(f"column {name} must hold text") from None
    if out.null_count == len(out):
        return None
    if not (pa.types.is_string(out.type) or pa.types.is_large_string(out.type)):
        raise InvalidArgument(f"column {name} must hold text, not {out.type}")
    return out


def _ints(arr: Any, name: str) -> np.ndarray | None:
    if arr is None:
        return None
    out = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else pa.array(arr)
    if out.null_count == len(out):
        return None
    if pa.types.is_timestamp(out.type):
        out = out.cast(pa.timestamp("ms")).cast(pa.int64())
    if not pa.types.is_integer(out.type):
        raise InvalidArgument(f"column {name} must hold integers, not {out.type}")
    return np.asarray(pc.fill_null(out.cast(pa.int64()), -1).to_numpy(zero_copy_only=False))


def columns_of(data: Any) -> Columns:
    """Columns of an Arrow table/batch, a pandas DataFrame or a dict of columns, named like
    the JSON API's message fields (``value`` required; ``key``, ``tag``, ``msg_id``,
    ``timestamp``, ``partition`` optional)."""
    if isinstance(data, pa.Table | pa.RecordBatch):
        source: Mapping[str, Any] = {name: data.column(name) for name in data.column_names}
    elif hasattr(data, "columns") and hasattr(data, "to_dict"):  # a pandas DataFrame
        table = pa.Table.from_pandas(data, preserve_index=False)
        source = {name: table.column(name) for name in table.column_names}
    elif isinstance(data, Mapping):
        source = data
    else:
        raise InvalidArgument(
            f"columns must be an Arrow table, a pandas DataFrame or a dict, not {type(data).__name__}"
        )
    unknown = sorted(set(source) - _PLAIN_FIELDS)
    if unknown:
        raise InvalidArgument(f"unknown message column(s) {unknown}; use {list(FIELDS)}")
    if source.get("value") is None:
        raise InvalidArgument("every message needs a value: the value column is missing")
    raw = source["value"]
    values = raw.combine_chunks() if isinstance(raw, pa.ChunkedArray) else None
    try:
        if values is None:
            values = pa.array(raw, pa.binary())
        elif not pa.types.is_binary(values.type):
            values = values.cast(pa.binary())
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidArgument(f"the value column must hold bytes or text: {exc}") from None
    if values.null_count:
        raise InvalidArgument("every message needs a value: the value column holds nulls")
    cols = Columns(
        values,
        _text(source.get("key"), "key"),
        _text(source.get("tag"), "tag"),
        _text(source.get("msg_id"), "msg_id"),
        _ints(source.get("timestamp"), "timestamp"),
        _ints(source.get("partition"), "partition"),
    )
    n = len(values)
    for name in ("keys", "tags", "msg_ids", "timestamps", "partitions"):
        column = getattr(cols, name)
        if column is not None and len(column) != n:
            raise InvalidArgument(f"column {name} has {len(column)} entries for {n} values")
    if cols.partitions is not None and (cols.partitions < -1).any():
        raise InvalidArgument("a partition is negative")
    if cols.keys is not None:
        empty = pc.fill_null(pc.equal(pc.binary_length(cols.keys), 0), False)
        if pc.any(empty).as_py():
            check_key("", int(np.flatnonzero(empty.to_numpy(zero_copy_only=False))[0]))
    return cols


def columns_of_dicts(items: Sequence[Any]) -> Columns | None:
    """Columns of a list of message dicts in the JSON API's shape, one comprehension per
    field; None when some item is not such a dict (the caller takes the general path)."""
    if set(map(type, items)) != {dict}:
        return None
    present = set().union(*items)  # every field name, gathered in C
    if not present <= _PLAIN_FIELDS:
        return None  # value_base64 or unknown fields: the general path decides
    data: dict[str, Any] = {}
    try:
        data["value"] = pa.array(list(map(itemgetter("value"), items)), pa.binary())
    except KeyError:
        raise InvalidArgument("every message needs a value") from None
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    for name in FIELDS[1:]:
        if name in present:
            try:  # itemgetter when every item has the field, the faster loop
                data[name] = list(map(itemgetter(name), items))
            except KeyError:
                data[name] = [m.get(name) for m in items]
    return columns_of(data)


def _varlen(arr: pa.Array | None, count: int) -> tuple[bytes, bytes]:
    """(lengths as little-endian i32 with -1 for null, concatenated bytes) of an array."""
    if arr is None:
        return np.full(count, -1, dtype="<i4").tobytes(), b""
    if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        arr = arr.cast(pa.binary())
    elif pa.types.is_string(arr.type):
        arr = arr.view(pa.binary())
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)
    lengths = np.diff(offsets).astype("<i4")
    if arr.null_count:
        lengths[~np.asarray(arr.is_valid().to_numpy(zero_copy_only=False))] = -1
    start, end = int(offsets[0]), int(offsets[-1])
    blob = memoryview(bufs[2])[start:end].tobytes() if bufs[2] is not None and end > start else b""
    return lengths.tobytes(), blob


def encode_columns(cols: Columns, producer_id: str, sequence: int) -> bytes:
    """The binary batch frame (docs/BATCH_FORMAT.md) of these columns."""
    count = len(cols)
    pid = producer_id.encode("utf-8")
    keys, tags, ids, values = (
        _varlen(cols.keys, count),
        _varlen(cols.tags, count),
        _varlen(cols.msg_ids, count),
        _varlen(cols.values, count),
    )

    def ints(column: np.ndarray | None, dtype: str) -> bytes:
        if column is None:
            return np.full(count, -1, dtype=dtype).tobytes()
        return np.ascontiguousarray(column, dtype=dtype).tobytes()

    return b"".join(
        (
            HEADER.pack(MAGIC, count, sequence, len(pid), 0),
            pid,
            ints(cols.partitions, "<i4"),
            ints(cols.timestamps, "<i8"),
            keys[0],
            tags[0],
            ids[0],
            values[0],
            keys[1],
            tags[1],
            ids[1],
            values[1],
        )
    )


def assign_partitions(routing: RoutingCache, topic: str, cols: Columns) -> np.ndarray | None:
    """Each row's partition as the node would choose it (given, by key hash, else round
    robin); None when the topic is unknown to the routing table (the node decides)."""
    partitions = routing.partitions(topic)
    if partitions is None:
        return cols.partitions
    n = len(cols)
    out = cols.partitions.copy() if cols.partitions is not None else np.full(n, -1, np.int64)
    if cols.keys is not None:
        lens, blob = _varlen(cols.keys, n)
        by_key = partitions_for_keys(blob, np.frombuffer(lens, "<i4"), partitions)
        keyed = (out < 0) & (by_key >= 0)
        out[keyed] = by_key[keyed]
    rest = np.flatnonzero(out < 0)
    if len(rest):  # over the partitions of nodes not marked down (client/common.py)
        start = routing.next_rr()
        live = np.asarray(routing.live_partitions(topic) or range(partitions), np.int64)
        out[rest] = live[(start + np.arange(len(rest))) % len(live)]
    return out


@dataclass
class ColumnBatch:
    """One produce call of columns: its frames, each with the rows it carries."""

    count: int
    sub_batches: list[SubBatch] = field(default_factory=list)
    rows: list[np.ndarray] = field(default_factory=list)


def plan_column_batches(
    routing: RoutingCache,
    sequences: SequenceSource,
    topic: str,
    cols: Columns,
    batch_size: int,
    fallback_address: str,
    rows: np.ndarray | None = None,
) -> ColumnBatch:
    """Frames of at most ``batch_size`` rows, grouped by owning node (``rows``: which rows
    of the call ``cols`` holds, for a re-plan after a 421)."""
    n = len(cols)
    rows = np.arange(n) if rows is None else rows
    parts = assign_partitions(routing, topic, cols)
    plan = ColumnBatch(n)
    if parts is not None:
        cols.partitions = parts
    route = routing.table.topics.get(topic) if routing.table is not None else None
    if parts is None or route is None:
        groups = [("?", fallback_address, np.arange(n))]
    else:
        owners = sorted(set(route.owners))
        owner_index = {o: i for i, o in enumerate(owners)}
        node_of_partition = np.array([owner_index[o] for o in route.owners], dtype=np.int64)
        if (parts >= len(node_of_partition)).any():
            raise InvalidArgument(
                f"partition {int(parts.max())} does not exist: topic {topic!r} has "
                f"{len(node_of_partition)} partitions"
            )
        node = node_of_partition[parts]
        order = np.argsort(node, kind="stable")
        bounds = np.searchsorted(node[order], np.arange(len(owners) + 1))
        groups = []
        for i, owner in enumerate(owners):
            members = order[bounds[i] : bounds[i + 1]]
            if len(members):
                groups.append((owner, routing.address_of(owner) or fallback_address, members))
    for node_id, address, members in groups:
        for lo in range(0, len(members), batch_size):
            chunk = members[lo : lo + batch_size]
            batch = SubBatch(node_id, address, [], [], sequences.next(), content_type=CONTENT_TYPE)
            batch.result = (
                cols.take(chunk) if len(groups) > 1 or len(members) > batch_size else cols
            )
            plan.sub_batches.append(batch)
            plan.rows.append(rows[chunk])
    return plan


def frame_sub_batch(batch: SubBatch, producer_id: str) -> None:
    """Encode a planned frame once (its columns wait in ``result`` until then)."""
    if not batch.body:
        batch.body = encode_columns(batch.result, producer_id, batch.sequence)
        batch.result = None
