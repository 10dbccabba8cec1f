"""A consumer that reads ahead: the next fetch is on the wire while the caller works.

Pages come from the multi-partition fetch (one request per owning node for every partition
being read) and are handed out as ``ReadColumns``; ``batches()`` gives Arrow record batches,
``messages()`` plain dicts for callers at the edge. A background thread issues the next
fetch as soon as the previous answer arrived (positions advance with the answer, not with
the caller), so a scan costs max(node, caller) per page instead of their sum.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from storage_node.client.arrow import columns_to_batch
from storage_node.client.fetch import FetchAnswer
from storage_node.errors import InvalidArgument
from storage_node.wire.batch_codec import ReadColumns

if TYPE_CHECKING:
    from storage_node.client.sync_client import Client


class Consumer:
    """Iterate pages of ``topic`` (see ``Client.consumer``); ``positions`` says where each
    partition continues after the pages handed out so far (what a group would commit)."""

    def __init__(
        self,
        client: Client,
        topic: str,
        partitions: Iterable[int] | None,
        offsets: dict[int, int] | None,
        page: int,
        follow: bool,
        wait_ms: int,
        prefetch: bool,
        ends: dict[int, int] | None = None,
        tag: str | None = None,
        max_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        if page < 1:
            raise InvalidArgument(f"page must be at least 1, got {page}")
        if ends is not None and follow:
            raise InvalidArgument("a following consumer has no end offsets")
        self.client = client
        self.topic = topic
        self.page = page
        self.follow = follow
        self.wait_ms = wait_ms
        self.tag = tag
        self.max_bytes = max_bytes
        given = dict(offsets or {})
        chosen = None if partitions is None else list(partitions)
        if chosen is not None and ends is not None and set(chosen) <= set(given) & set(ends):
            # a planned range (a Spark task): no need to ask the cluster where things are
            self.positions: dict[int, int] = {p: int(given[p]) for p in chosen}
            self._ends = {p: int(ends[p]) for p in chosen}
        else:
            info = client.describe_topic(topic)
            layout = {p["partition"]: p for p in info["partition_offsets"]}
            chosen = sorted(layout) if chosen is None else chosen
            missing = [p for p in chosen if p not in layout]
            if missing:
                raise InvalidArgument(f"topic {topic!r} has no partition {missing[0]}")
            self.positions = {p: int(given.get(p, layout[p]["first_offset"])) for p in chosen}
            # without follow, read to the end as it was when the consumer started
            stop = ends or {}
            self._ends = {p: int(stop.get(p, layout[p]["next_offset"])) for p in chosen}
        self._fetch_positions = dict(self.positions)
        self._pool = ThreadPoolExecutor(1, "msgstore-prefetch") if prefetch else None
        self._lock = threading.Lock()
        self._closed = False

    # -- what to ask next ---------------------------------------------------------------------
    def _wanted(self) -> dict[int, int]:
        if self.follow:
            return dict(self._fetch_positions)
        return {p: o for p, o in self._fetch_positions.items() if o < self._ends[p]}

    def _fetch(self) -> FetchAnswer | None:
        wanted = self._wanted()
        if not wanted:
            return None
        if not self.follow:  # never more than the rest of each partition's range
            page = min(self.page, max(e - wanted[p] for p, e in self._ends.items() if p in wanted))
        else:
            page = self.page
        answer = self.client.fetch(
            self.topic,
            wanted,
            page,
            max_bytes=self.max_bytes,
            wait_ms=self.wait_ms if self.follow else None,
            tag=self.tag,
        )
        for p, cols in answer.pages.items():
            if cols.next_offset is not None:
                self._fetch_positions[p] = cols.next_offset
            elif not self.follow:
                self._ends[p] = self._fetch_positions[p]
            if not len(cols) and not self.follow:
                self._ends[p] = min(self._ends[p], self._fetch_positions[p])
        return answer

    def __iter__(self) -> Iterator[ReadColumns]:
        pending: Future[FetchAnswer | None] | None = None
        try:
            answer = self._fetch()
            while answer is not None and not self._closed:
                if self._pool is not None:
                    pending = self._pool.submit(self._fetch)
                for p, cols in answer.pages.items():
                    if len(cols):
                        self.positions[p] = int(cols.offsets[-1]) + 1
                        yield cols
                    if cols.next_offset is not None:
                        self.positions[p] = max(self.positions[p], cols.next_offset)
                if pending is not None:
                    answer, pending = pending.result(), None
                else:
                    answer = self._fetch()
        finally:
            if pending is not None:
                pending.cancel()

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Pages as Arrow record batches (topic, partition, offset, key, value, tag, msg_id,
        timestamp), built over the answer's buffers."""
        for cols in self:
            yield columns_to_batch(self.topic, cols)

    def messages(self) -> Iterator[dict[str, Any]]:
        """Plain message dicts (``value`` as bytes), for callers that want rows."""
        for cols in self:
            yield from cols.to_rows(self.topic)

    def close(self) -> None:
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
