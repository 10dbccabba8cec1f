"""The append entry points: their arguments checked and handed to the group commit.

``append`` (MessageIn objects), ``append_columns`` (parallel lists) and ``append_packed``
(packed columns) differ only in the shape of the batch; each checks it, becomes a ``Ticket``
and waits in the group commit (``group_commit``). The ``submit*`` forms run the same on a
pool, for callers that must not block (asyncio). Contracts: docs/ENGINE_API.md.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from storage_node.errors import InvalidArgument, InvalidBatch
from storage_node.formats.names import check_name
from storage_node.formats.packed import ListBatch, PackedBatch, check_list_shapes, headers_column
from storage_node.formats.record import MAX_PRODUCER_BYTES
from storage_node.store.arguments import check_int
from storage_node.store.batches import Ticket, check_batch_size
from storage_node.store.group_commit import GroupCommit
from storage_node.store.pools import LazyPool
from storage_node.store.topics import TopicRegistry
from storage_node.store.types import AppendColumns, AppendResult, MessageIn, TopicConfig

_FIELDS = attrgetter("value", "key", "tag", "msg_id", "timestamp", "partition")
APPEND_THREADS = 16  # threads running ``submit*`` appends


class Appends:
    """The append entry points of one store."""

    def __init__(
        self,
        topics: TopicRegistry,
        group_commit: GroupCommit,
        check_open: Callable[[], None],
        resume: Callable[[], None],
        backpressure: Callable[[], None],
    ) -> None:
        """``resume()`` recovers in place after an earlier write error (a no-op without
        one); ``backpressure()`` waits while the write cache is over its bound."""
        self.topics = topics
        self.group_commit = group_commit
        self.check_open = check_open
        self.resume = resume
        self.backpressure = backpressure
        self.pool = LazyPool(APPEND_THREADS, "msgstore-append")

    def append(
        self,
        topic: str,
        messages: Sequence[MessageIn],
        producer_id: str | None = None,
        sequence: int | None = None,
        partitions_allowed: Sequence[int] | None = None,
    ) -> list[AppendResult]:
        """Append a batch; durable per flush_mode when this returns. See docs/ENGINE_API.md."""
        if not isinstance(messages, list | tuple):
            raise InvalidBatch("a batch is a list of MessageIn")
        check_batch_size(len(messages))
        if set(map(type, messages)) != {MessageIn}:
            i = next(i for i, m in enumerate(messages) if type(m) is not MessageIn)
            raise InvalidBatch(f"message {i} is not a MessageIn", index=i)
        values, keys, tags, msg_ids, timestamps, partitions = (
            list(c) for c in zip(*map(_FIELDS, messages), strict=True)
        )
        headers = [m.headers for m in messages]
        if any(headers):  # messages with headers: packed here, with their headers column
            cfg = self._start(topic, producer_id, sequence)
            batch = PackedBatch.from_lists(values, keys, tags, msg_ids, timestamps, partitions)
            batch.headers = headers_column(headers)
            return self._queue(cfg, batch, producer_id, sequence, partitions_allowed).results()
        return self.append_columns(
            topic,
            values,
            keys,
            tags,
            msg_ids,
            timestamps,
            partitions,
            producer_id,
            sequence,
            partitions_allowed,
        ).results()

    def append_columns(
        self,
        topic: str,
        values: Sequence[bytes],
        keys: Sequence[str | None] | None = None,
        tags: Sequence[str | None] | None = None,
        msg_ids: Sequence[str | None] | None = None,
        timestamps: Sequence[int | None] | None = None,
        partitions: Sequence[int | None] | None = None,
        producer_id: str | None = None,
        sequence: int | None = None,
        partitions_allowed: Sequence[int] | None = None,
    ) -> AppendColumns:
        """``append`` of a batch given as parallel lists (None = not given for all): same
        checks, durability and idempotency, packed into columns with no object per message."""
        cfg = self._start(topic, producer_id, sequence)
        columns = (keys, tags, msg_ids, timestamps, partitions)
        check_list_shapes(values, columns)
        return self._queue(
            cfg, ListBatch(values, columns), producer_id, sequence, partitions_allowed
        )

    def append_packed(
        self,
        topic: str,
        batch: PackedBatch,
        producer_id: str | None = None,
        sequence: int | None = None,
        partitions_allowed: Sequence[int] | None = None,
    ) -> AppendColumns:
        """``append`` of a batch already packed as columns (the binary wire format's shape);
        concurrent batches are written and fsynced together (group_commit.py)."""
        cfg = self._start(topic, producer_id, sequence)
        if not isinstance(batch, PackedBatch):
            raise InvalidBatch("append_packed takes a PackedBatch")
        return self._queue(cfg, batch, producer_id, sequence, partitions_allowed)

    def submit(
        self, topic: str, messages: Sequence[MessageIn], *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[list[AppendResult]]:
        """``append`` without blocking the caller (for asyncio: ``asyncio.wrap_future``)."""
        return self._executor().submit(self.append, topic, messages, *args, **kwargs)

    def submit_columns(
        self, topic: str, values: Sequence[bytes], *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[AppendColumns]:
        """``append_columns`` without blocking the caller (same arguments)."""
        return self._executor().submit(self.append_columns, topic, values, *args, **kwargs)

    def submit_packed(
        self, topic: str, batch: PackedBatch, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[AppendColumns]:
        """``append_packed`` without blocking the caller (same arguments)."""
        return self._executor().submit(self.append_packed, topic, batch, *args, **kwargs)

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        self.check_open()
        return self.pool.get()

    def _start(self, topic: str, producer_id: str | None, sequence: int | None) -> TopicConfig:
        """Checks every append starts with; resumes after an earlier write error."""
        self.check_open()
        cfg = self.topics.get(topic)
        self.resume()
        if producer_id is not None or sequence is not None:
            producer = check_name("producer", producer_id)
            check_int("sequence", sequence, 0, 2**63 - 1)
            if len(producer.encode()) > MAX_PRODUCER_BYTES:
                raise InvalidArgument(f"producer id longer than {MAX_PRODUCER_BYTES} bytes")
        return cfg

    def _queue(
        self,
        cfg: TopicConfig,
        batch: PackedBatch | ListBatch,
        producer_id: str | None,
        sequence: int | None,
        partitions_allowed: Sequence[int] | None,
    ) -> AppendColumns:
        """Queue a batch for the group commit and sleep until it is answered (or leads)."""
        check_batch_size(len(batch))
        ticket = Ticket(cfg, batch, partitions_allowed, producer_id, sequence)
        self.backpressure()
        return self.group_commit.submit(ticket)
