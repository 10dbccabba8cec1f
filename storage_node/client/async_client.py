"""asyncio client (aiohttp): the same routing, batching and retry rules as the sync Client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import aiohttp

from storage_node.client.common import (
    COLUMNS_ACCEPT,
    OutMessage,
    RoutingCache,
    SequenceSource,
    SubBatch,
    TlsError,
    auth_headers,
    check_scheme,
    columns_from_answer,
    encode_sub_batch,
    error_from_response,
    is_retryable,
    key_path,
    normalize_endpoints,
    plan_sub_batches,
    read_params,
    read_path,
    redirect_target,
    resolve_ca,
    results_from_answer,
    to_out_message,
)
from storage_node.errors import MsgStoreError, NotOwner, Unavailable
from storage_node.tls import client_context
from storage_node.wire.batch_codec import ReadColumns


class AsyncClient:
    """Use as ``async with AsyncClient(endpoint) as client: ...``."""

    def __init__(
        self,
        endpoint: str | Iterable[str],
        token: str | None = None,
        timeout: float = 60.0,
        producer_id: str | None = None,
        max_retries: int = 8,
        binary: bool = True,
        listener: str = "auto",
        ca: str | None = None,
    ) -> None:
        # ca: as for Client (default env MSGSTORE_CA); with one, every address must be https.
        self.ca = resolve_ca(ca)
        self.endpoints = normalize_endpoints(endpoint, tls=self.ca is not None)
        self.token = token
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.max_retries = max_retries
        self.binary = binary
        self.routing = RoutingCache(self.endpoints, listener)
        self.sequences = SequenceSource(producer_id)
        self._session: aiohttp.ClientSession | None = None

    @property
    def producer_id(self) -> str:
        return self.sequences.producer_id

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self.timeout,
                headers=auth_headers(self.token),
                connector=aiohttp.TCPConnector(ssl=client_context(self.ca)),
            )
        return self._session

    async def request(
        self,
        method: str,
        address: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        content_type: str | None = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        raw: bool = False,
    ) -> Any:
        """One HTTP call; ``raw`` answers (content type, body bytes) instead of parsed JSON."""
        check_scheme(address, self.ca is not None)
        hdrs = dict(headers or {})
        if content_type:
            hdrs["Content-Type"] = content_type
        query = {k: str(v) for k, v in (params or {}).items() if v is not None}
        try:
            async with self._client_session().request(
                method, address + path, json=json_body, data=data, params=query, headers=hdrs
            ) as resp:
                if resp.status >= 400:
                    try:
                        body = await resp.json(content_type=None)
                    except ValueError:
                        body = await resp.text()
                    raise error_from_response(resp.status, body)
                if raw:
                    return resp.headers.get("Content-Type"), await resp.read()
                return await resp.json(content_type=None)
        except aiohttp.ClientSSLError as exc:
            raise TlsError(f"TLS with {address} failed: {exc}", address=address) from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise Unavailable(f"cannot reach {address}: {exc}", address=address) from None

    async def _any_node(self, method: str, path: str, **kwargs: Any) -> Any:
        last: BaseException | None = None
        for attempt in range(self.max_retries):
            for address in self.routing.node_addresses() + self.endpoints:
                try:
                    return await self.request(method, address, path, **kwargs)
                except MsgStoreError as err:
                    if not is_retryable(err):
                        raise
                    last = err
            await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
        raise last or Unavailable("no node answered")

    async def refresh_routing(self) -> dict[str, Any]:
        doc = await self._any_node("GET", "/v1/cluster")
        self.routing.update(doc)
        return doc

    async def cluster(self) -> dict[str, Any]:
        return await self.refresh_routing()

    async def create_topic(
        self, name: str, partitions: int, compression: str = "lz4", retention_hours: float = 168.0
    ) -> dict[str, Any]:
        body = {
            "name": name,
            "partitions": partitions,
            "compression": compression,
            "retention_hours": retention_hours,
        }
        doc = await self._any_node("POST", "/v1/topics", json_body=body)
        await self.refresh_routing()
        return doc

    async def delete_topic(self, name: str) -> dict[str, Any]:
        """Delete a topic on every node; ``pending_nodes`` names those that did not answer
        (each deletes its copy when it next reads the routing table)."""
        doc = await self._any_node("DELETE", f"/v1/topics/{quote(name, safe='')}")
        await self.refresh_routing()
        return doc

    async def add_partitions(self, name: str, partitions: int) -> dict[str, Any]:
        """Raise a topic's partition count to ``partitions`` (only up). Keyed messages
        produced afterwards map to ``key_hash(key) % partitions``."""
        path = f"/v1/topics/{quote(name, safe='')}/partitions"
        doc = await self._any_node("POST", path, json_body={"partitions": partitions})
        await self.refresh_routing()
        return doc

    async def list_topics(self) -> list[dict[str, Any]]:
        return (await self._any_node("GET", "/v1/topics"))["topics"]

    async def describe_topic(self, topic: str) -> dict[str, Any]:
        return await self._any_node("GET", f"/v1/topics/{quote(topic, safe='')}")

    async def produce(self, topic: str, messages: Iterable[Any]) -> list[dict[str, Any]]:
        """Append messages; sub-batches for different nodes travel concurrently."""
        out = [to_out_message(m) for m in messages]
        if not out:
            return []
        if self.routing.partitions(topic) is None:
            await self.refresh_routing()
        results: list[Any] = [None] * len(out)
        pending = plan_sub_batches(
            self.routing, self.sequences, topic, out, list(range(len(out))), self.endpoints[0]
        )
        while pending:
            for batch in pending:
                encode_sub_batch(batch, self.producer_id, self.binary)
            outcomes = await asyncio.gather(*(self._send(topic, b) for b in pending))
            replan: list[tuple[OutMessage, int]] = []
            for batch, outcome in zip(pending, outcomes, strict=True):
                if isinstance(outcome, NotOwner):
                    replan.extend(zip(batch.messages, batch.indices, strict=True))
                    continue
                for index, result in zip(batch.indices, outcome, strict=True):
                    results[index] = result
            pending = []
            if replan:
                await self.refresh_routing()
                pending = plan_sub_batches(
                    self.routing,
                    self.sequences,
                    topic,
                    [m for m, _ in replan],
                    [i for _, i in replan],
                    self.endpoints[0],
                )
        return results

    async def _send(self, topic: str, batch: SubBatch) -> Any:
        path = f"/v1/topics/{quote(topic, safe='')}/messages"
        delay = 0.05
        while True:
            batch.attempts += 1
            try:
                answer = await self.request(
                    "POST", batch.address, path, data=batch.body, content_type=batch.content_type
                )
                return results_from_answer(batch, answer)
            except NotOwner as err:
                if redirect_target(err) is None or batch.attempts > self.max_retries:
                    raise
                return err
            except MsgStoreError as err:
                if not is_retryable(err) or batch.attempts > self.max_retries:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _owner_request(
        self, topic: str, partition: int, method: str, path: str, **kw: Any
    ) -> Any:
        if self.routing.partitions(topic) is None:
            await self.refresh_routing()
        owner = self.routing.owner(topic, partition)
        address = owner[1] if owner else self.endpoints[0]
        delay = 0.05
        for _attempt in range(self.max_retries):
            try:
                return await self.request(method, address, path, **kw)
            except NotOwner as err:
                await self.refresh_routing()
                target = redirect_target(err, self.routing)
                if target is None:
                    raise
                address = target
            except MsgStoreError as err:
                if not is_retryable(err):
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        return await self.request(method, address, path, **kw)

    async def read(
        self,
        topic: str,
        partition: int,
        offset: int | None = None,
        max_messages: int = 100,
        max_bytes: int | None = None,
        tag: str | None = None,
        start_time: int | None = None,
        end_time: int | None = None,
    ) -> dict[str, Any]:
        params = read_params(offset, max_messages, max_bytes, tag, start_time, end_time)
        return await self._owner_request(
            topic, partition, "GET", read_path(topic, partition), params=params
        )

    async def read_columns(
        self,
        topic: str,
        partition: int,
        offset: int | None = None,
        max_messages: int = 100,
        max_bytes: int | None = None,
        tag: str | None = None,
        start_time: int | None = None,
        end_time: int | None = None,
    ) -> ReadColumns:
        """The same page as ``read`` in the binary read framing, decoded to numpy columns."""
        params = read_params(offset, max_messages, max_bytes, tag, start_time, end_time)
        content_type, body = await self._owner_request(
            topic,
            partition,
            "GET",
            read_path(topic, partition),
            params=params,
            headers=COLUMNS_ACCEPT,
            raw=True,
        )
        return columns_from_answer(content_type, body)

    async def lookup_key(
        self, topic: str, key: str, begin: int = 0, end: int | None = None, max_count: int = 32
    ) -> dict[str, Any]:
        return await self._any_node(
            "GET", key_path(topic, key), params={"begin": begin, "end": end, "max": max_count}
        )

    async def lookup_key_columns(
        self, topic: str, key: str, begin: int = 0, end: int | None = None, max_count: int = 32
    ) -> ReadColumns:
        """``lookup_key`` in the binary read framing (newest first)."""
        content_type, body = await self._any_node(
            "GET",
            key_path(topic, key),
            params={"begin": begin, "end": end, "max": max_count},
            headers=COLUMNS_ACCEPT,
            raw=True,
        )
        return columns_from_answer(content_type, body)

    async def get_message(self, msg_id: str) -> dict[str, Any]:
        return await self._any_node("GET", f"/v1/messages/{quote(msg_id, safe='')}")

    async def commit_offset(
        self, group: str, topic: str, partition: int, offset: int
    ) -> dict[str, Any]:
        body = {"topic": topic, "partition": partition, "offset": offset}
        path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
        return await self._owner_request(topic, partition, "POST", path, json_body=body)

    async def committed_offsets(
        self, group: str, topic: str | None = None
    ) -> dict[str, dict[int, int]]:
        path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
        doc = await self._any_node("GET", path, params={"topic": topic})
        return {t: {int(p): o for p, o in parts.items()} for t, parts in doc["offsets"].items()}
