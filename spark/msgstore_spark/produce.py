"""Executor side of a write: Arrow batches -> idempotent binary batches on the owning nodes.

Idempotence: a task's producer id comes from the write job and the task's partition id
(never the attempt), and its sequences count the chunks it sends, so a retried task or a
re-run stage re-sends the same (producer id, sequence) pairs, and each node answers a
repeat with its first result instead of writing again. That holds when the task's input
is the same on every attempt (files, or any deterministic plan).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa

from msgstore_spark.arrow_codec import binary_column, encode_frame
from msgstore_spark.cluster import connect
from msgstore_spark.errors import ColumnError, explained
from msgstore_spark.options import WriteOptions
from storage_node.client import Client
from storage_node.client.common import is_retryable
from storage_node.errors import InvalidBatch, MsgStoreError, NotOwner
from storage_node.formats.limits import EMPTY_KEY_RULE
from storage_node.formats.partitioning import partitions_for_keys
from storage_node.wire.append_answer import decode_append_answer
from storage_node.wire.batch_codec import CONTENT_TYPE

ROUNDS = 64  # sequence = chunk * ROUNDS + re-routing round
RETRY_BUDGET_S = 120.0  # ride out a node restart
MAX_IN_FLIGHT = 3  # chunks sent whose answers are still outstanding


@dataclass
class TaskReport:
    """What one task wrote: the commit message payload."""

    producer_id: str
    rows: int = 0
    batches: int = 0
    per_partition: Counter = field(default_factory=Counter)
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> (min, max)

    def add(self, partitions: np.ndarray, offsets: np.ndarray) -> None:
        """Count a batch's results, per partition with array operations."""
        self.rows += len(offsets)
        for p in np.unique(partitions).tolist():
            mine = offsets[partitions == p]
            self.per_partition[p] += len(mine)
            lo, hi = int(mine.min()), int(mine.max())
            lo_hi = self.offsets.get(p)
            self.offsets[p] = (lo, hi) if lo_hi is None else (min(lo_hi[0], lo), max(lo_hi[1], hi))


def _chunks(batches: Iterable[pa.RecordBatch], rows: int, max_bytes: int) -> Iterator[pa.Table]:
    """Regroup Spark's Arrow batches into request-sized tables."""
    pending: list[pa.RecordBatch] = []
    count = size = 0
    for batch in batches:
        start = 0
        while start < batch.num_rows:
            piece = batch.slice(start, rows - count)
            pending.append(piece)
            count += piece.num_rows
            size += piece.nbytes
            start += piece.num_rows
            if count >= rows or size >= max_bytes:
                yield pa.Table.from_batches(pending)
                pending, count, size = [], 0, 0
    if pending:
        yield pa.Table.from_batches(pending)


def _column(table: pa.Table, name: str) -> pa.Array | None:
    if name not in table.column_names:
        return None
    return table.column(name).combine_chunks()


def _check_keys(table: pa.Table) -> None:
    """The empty-key rule of every way in (storage_node/formats/limits.py), for a chunk."""
    keys = _column(table, "key")
    if keys is None:
        return
    lens, _blob = binary_column(keys, table.num_rows)
    empty = np.flatnonzero(lens == 0)
    if len(empty):
        raise ColumnError("key", f"row {int(empty[0])} of a chunk holds '': {EMPTY_KEY_RULE}")


def _timestamps_ms(col: pa.Array | None, count: int) -> np.ndarray:
    """Born times in ms (-1 = not given) from a timestamp or an integer-ms column."""
    if col is None:
        return np.full(count, -1, dtype=np.int64)
    scale = 1
    if pa.types.is_timestamp(col.type):
        scale = {"s": -1000, "ms": 1, "us": 1000, "ns": 1_000_000}[col.type.unit]
        col = col.cast(pa.int64())
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    out = col.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    out = out * -scale if scale < 0 else out // scale
    if (out[valid] < 0).any():
        raise InvalidBatch("column 'timestamp' holds a time before 1970 (not storable)")
    out[~valid] = -1
    return out


class TaskWriter:
    """Writes one Spark task's rows; one instance per task attempt."""

    def __init__(self, opts: WriteOptions, producer_id: str, rr_start: int) -> None:
        self.opts = opts
        self.report = TaskReport(producer_id)
        self.client: Client = connect(opts.conn, producer_id)
        self.rr = rr_start
        self.senders: dict[str, ThreadPoolExecutor] = {}
        self.path = f"/v1/topics/{quote(opts.topic, safe='')}/messages"
        with explained(opts.conn.endpoints, opts.topic):
            self.client.refresh_routing()
        self._load_route()

    def _load_route(self) -> None:
        table = self.client.routing.table
        route = table.topics.get(self.opts.topic) if table else None
        if table is None or route is None:
            with explained(self.opts.conn.endpoints, self.opts.topic):
                self.client.refresh_routing()
                table = self.client.routing.table
                route = table.topics.get(self.opts.topic) if table else None
        if route is None or table is None:
            # a standalone node owns everything
            self.partitions = int(self.client.describe_topic(self.opts.topic)["partitions"])
            self.addresses = [self.opts.conn.endpoints[0]]
            self.owner_of = np.zeros(self.partitions, dtype=np.int32)
            return
        self.partitions = route.partitions
        ids = [n.id for n in table.nodes]
        self.addresses = [table.node_address(i) or "" for i in ids]
        self.owner_of = np.array([ids.index(o) for o in route.owners], dtype=np.int32)

    def _partitions_of(self, table: pa.Table) -> np.ndarray:
        count = table.num_rows
        given = _column(table, "partition")
        parts = (
            np.full(count, -1, dtype=np.int64)
            if given is None
            else given.cast(pa.int64())
            .fill_null(-1)
            .to_numpy(zero_copy_only=False)
            .astype(np.int64)
        )
        if (parts >= self.partitions).any() or (parts < -1).any():
            bad = int(parts[(parts >= self.partitions) | (parts < -1)][0])
            raise ColumnError(
                "partition",
                f"column 'partition' holds {bad}, but topic {self.opts.topic!r} has "
                f"partitions 0..{self.partitions - 1}",
            )
        free = np.nonzero(parts < 0)[0]
        if len(free):
            key_lens, key_blob = binary_column(_column(table, "key"), count)
            keyed = free[key_lens[free] >= 0]
            if len(keyed):  # the partition function of the nodes, for the whole chunk at once
                parts[keyed] = partitions_for_keys(key_blob, key_lens, self.partitions)[keyed]
            rest = free[key_lens[free] < 0]
            parts[rest] = (self.rr + np.arange(len(rest))) % self.partitions
            self.rr += len(rest)
        return parts

    def write(self, batches: Iterable[pa.RecordBatch]) -> TaskReport:
        """Send chunk after chunk without waiting for each answer (up to MAX_IN_FLIGHT).

        One sender thread per node keeps each node's batches in input order, so messages of
        a partition keep the order of the task's rows.
        """
        pending: deque[tuple[int, pa.Table, np.ndarray, np.ndarray, list]] = deque()
        try:
            for index, table in enumerate(
                _chunks(batches, self.opts.batch_size, self.opts.max_batch_bytes)
            ):
                if table.column("value").null_count:
                    raise InvalidBatch(
                        "column 'value' is null in some rows; every message needs one"
                    )
                _check_keys(table)
                parts = self._partitions_of(table)
                stamps = _timestamps_ms(_column(table, "timestamp"), table.num_rows)
                rows = np.arange(table.num_rows)
                sends = self._submit(table, rows, parts, stamps, index * ROUNDS)
                pending.append((index, table, parts, stamps, sends))
                while len(pending) > MAX_IN_FLIGHT:
                    self._settle(*pending.popleft())
            while pending:
                self._settle(*pending.popleft())
        finally:
            for pool in self.senders.values():
                pool.shutdown(wait=True, cancel_futures=True)
            self.client.close()
        return self.report

    def _submit(
        self, table: pa.Table, rows: np.ndarray, parts: np.ndarray, stamps: np.ndarray, seq: int
    ) -> list[tuple[np.ndarray, Future]]:
        owners = self.owner_of[parts[rows]]
        sends = []
        for n in np.unique(owners).tolist():
            idx = rows[owners == n]
            address = self.addresses[n]
            body = self._frame(table, idx, parts, stamps, seq)
            sender = self.senders.get(address)
            if sender is None:
                sender = self.senders[address] = ThreadPoolExecutor(max_workers=1)
            sends.append((idx, sender.submit(self._post, address, body)))
        return sends

    def _settle(
        self,
        index: int,
        table: pa.Table,
        parts: np.ndarray,
        stamps: np.ndarray,
        sends: list[tuple[np.ndarray, Future]],
    ) -> None:
        """Collect a chunk's answers; rows a node refused as not its own go to the new owner."""
        for round_ in range(1, ROUNDS + 1):
            misrouted = []
            for idx, future in sends:
                outcome = future.result()
                if isinstance(outcome, NotOwner):
                    misrouted.append(idx)
                else:
                    self.report.add(outcome.partitions, outcome.offsets)
            self.report.batches += 1
            if not misrouted:
                return
            if round_ == ROUNDS:
                break
            self.client.refresh_routing()
            self._load_route()
            rows = np.concatenate(misrouted)
            sends = self._submit(table, rows, parts, stamps, index * ROUNDS + round_)
        raise MsgStoreError(f"the owners of topic {self.opts.topic!r} kept moving; giving up")

    def _frame(
        self, table: pa.Table, idx: np.ndarray, parts: np.ndarray, stamps: np.ndarray, seq: int
    ) -> bytes:
        sub = table.take(pa.array(idx)) if len(idx) != table.num_rows else table
        return encode_frame(
            _column(sub, "value"),
            _column(sub, "key"),
            _column(sub, "tag"),
            _column(sub, "msg_id"),
            stamps[idx],
            parts[idx],
            self.report.producer_id,
            seq,
        )

    def _post(self, address: str, body: bytes) -> Any:
        """Send one frame, retrying outages with the same bytes; a 421 is returned."""
        deadline = time.monotonic() + RETRY_BUDGET_S
        delay = 0.05
        while True:
            try:
                with explained(self.opts.conn.endpoints, self.opts.topic):
                    answer = self.client.request(
                        "POST",
                        address,
                        self.path,
                        data=body,
                        content_type=CONTENT_TYPE,
                        headers={"Accept": CONTENT_TYPE},
                        raw=True,
                    )
                    return decode_append_answer(answer.content)
            except NotOwner as err:
                return err
            except MsgStoreError as err:
                if not is_retryable(err) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
