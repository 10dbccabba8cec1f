"""Consumers that read ahead: the next fetch is on the wire while the caller works.

Pages come from the multi-partition fetch (one request per owning node for every partition
being read) and are handed out as ``ReadColumns``; ``batches()`` gives Arrow record batches,
``messages()`` plain dicts for callers at the edge. The next fetch is issued as soon as the
previous answer arrived (positions advance with the answer, not with the caller), so a scan
costs max(node, caller) per page instead of their sum. ``Consumer`` does it with a
background thread for the blocking ``Client``, ``AsyncConsumer`` with a task for the
``AsyncClient``; what to ask and where a page leaves each partition is
``ConsumerState``, run by the shared core.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from storage_node.client.consumer_state import ConsumerState
from storage_node.client.core import ClientCore
from storage_node.client.fetch import FetchAnswer
from storage_node.client.steps import Op, T
from storage_node.errors import MsgStoreError
from storage_node.wire.read_answer import ReadColumns

if TYPE_CHECKING:
    import pyarrow as pa


class Runs(Protocol):
    """What a consumer needs of the blocking client: its core and a way to run an operation
    (the consumer does not import the client, which imports it)."""

    core: ClientCore

    def _run(self, op: Op[T]) -> T: ...


class RunsAsync(Protocol):
    """What an ``AsyncConsumer`` needs of the ``AsyncClient``."""

    core: ClientCore

    async def _run(self, op: Op[T]) -> T: ...


class Consumer:
    """Iterate pages of ``topic`` (see ``Client.consumer``); ``positions`` says where each
    partition continues after the pages handed out so far (what a group would commit)."""

    def __init__(self, client: Runs, state: ConsumerState, prefetch: bool) -> None:
        self.client = client
        self.topic = state.topic
        self.state = client._run(client.core.place_consumer(state))  # bad partitions: here
        self._pool = ThreadPoolExecutor(1, "msgstore-prefetch") if prefetch else None
        self._closed = False

    @property
    def positions(self) -> dict[int, int]:
        return self.state.positions

    def _fetch(self) -> FetchAnswer | None:
        return self.client._run(self.client.core.consume(self.state))

    def __iter__(self) -> Iterator[ReadColumns]:
        pending: Future[FetchAnswer | None] | None = None
        try:
            answer = self._fetch()
            while answer is not None and not self._closed:
                if self._pool is not None:
                    pending = self._pool.submit(self._fetch)
                yield from self.state.hand_out(answer)
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
        from storage_node.client.arrow import columns_to_batch

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


class AsyncConsumer:
    """``Consumer`` for the ``AsyncClient``: ``async for cols in consumer``, the next fetch
    running as a task while the caller works on this page. The topic's offsets are asked
    (when the range is not given) at the first page or on ``async with``."""

    def __init__(self, client: RunsAsync, state: ConsumerState, prefetch: bool) -> None:
        self.client = client
        self.topic = state.topic
        self.state = state
        self.prefetch = prefetch
        self._pending: asyncio.Future[FetchAnswer | None] | None = None
        self._closed = False

    @property
    def positions(self) -> dict[int, int]:
        return self.state.positions

    async def start(self) -> AsyncConsumer:
        """Ask where the topic's partitions start and end (once; a no-op for a given
        range). Bad partitions raise here."""
        await self.client._run(self.client.core.place_consumer(self.state))
        return self

    async def _fetch(self) -> FetchAnswer | None:
        return await self.client._run(self.client.core.consume(self.state))

    async def _pages(self) -> AsyncIterator[ReadColumns]:
        await self.start()
        try:
            answer = await self._fetch()
            while answer is not None and not self._closed:
                if self.prefetch:
                    self._pending = asyncio.ensure_future(self._fetch())
                for cols in self.state.hand_out(answer):
                    yield cols
                if self._pending is not None:
                    answer, self._pending = await self._pending, None
                else:
                    answer = await self._fetch()
        finally:
            await self._cancel()

    def __aiter__(self) -> AsyncIterator[ReadColumns]:
        return self._pages()

    async def batches(self) -> AsyncIterator[pa.RecordBatch]:
        """Pages as Arrow record batches (as ``Consumer.batches``)."""
        from storage_node.client.arrow import columns_to_batch

        async for cols in self:
            yield columns_to_batch(self.topic, cols)

    async def messages(self) -> AsyncIterator[dict[str, Any]]:
        """Plain message dicts (``value`` as bytes)."""
        async for cols in self:
            for row in cols.to_rows(self.topic):
                yield row

    async def _cancel(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, MsgStoreError):
                await pending  # an abandoned read-ahead: its outcome does not matter

    async def close(self) -> None:
        self._closed = True
        await self._cancel()

    async def __aenter__(self) -> AsyncConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
