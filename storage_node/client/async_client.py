"""asyncio client: runs the same operations as ``Client`` (client/core.py) over aiohttp."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

import aiohttp

from storage_node.client import users
from storage_node.client.client_base import ClientBase
from storage_node.client.common import TlsError, auth_headers, check_scheme, read_params
from storage_node.client.consumer import AsyncConsumer
from storage_node.client.consumer_state import ConsumerState
from storage_node.client.fetch import FetchAnswer
from storage_node.client.packing import columns_of
from storage_node.client.produced import Produced
from storage_node.client.steps import Call, Gather, Op, Sleep, T, answer_of
from storage_node.errors import MsgStoreError, Unavailable
from storage_node.tls import client_context
from storage_node.wire.read_answer import ReadColumns

FRAME_MESSAGES = 5000


class AsyncClient(ClientBase[AsyncConsumer]):
    """Use as ``async with AsyncClient(endpoint) as client: ...``."""

    def _open(self, timeout: float) -> None:
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

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
                connector=aiohttp.TCPConnector(ssl=client_context(self.core.ca)),
            )
        return self._session

    async def _send(self, call: Call) -> Any:
        check_scheme(call.address, self.core.ca is not None)
        body, headers = call.body_and_headers()
        try:
            async with self._client_session().request(
                call.method,
                call.address + call.path,
                data=body,
                params=call.query(),
                headers=headers,
            ) as resp:
                content = await resp.read()
                return answer_of(call, resp.status, resp.headers.items(), content)
        except aiohttp.ClientSSLError as exc:
            raise TlsError(f"TLS with {call.address} failed: {exc}", address=call.address) from None
        except aiohttp.ClientConnectorError as exc:  # no connection: nothing was sent
            raise Unavailable(
                f"cannot reach {call.address}: {exc}", address=call.address, sent=False
            ) from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise Unavailable(f"cannot reach {call.address}: {exc}", address=call.address) from None

    async def _run(self, op: Op[T]) -> T:
        """Carry out an operation's steps; a failed call is thrown back into it."""
        outcome: Any = None
        failure: MsgStoreError | None = None
        while True:
            try:
                step = op.throw(failure) if failure is not None else op.send(outcome)
            except StopIteration as done:
                result: T = done.value
                return result
            outcome, failure = None, None
            try:
                if isinstance(step, Call):
                    outcome = await self._send(step)
                elif isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                elif isinstance(step, Gather):
                    outcome = await asyncio.gather(*(self._attempt(o) for o in step.ops))
            except MsgStoreError as err:
                failure = err

    async def _attempt(self, op: Op[Any]) -> Any:
        try:
            return await self._run(op)
        except MsgStoreError as err:
            return err

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
        """One HTTP call; ``raw`` answers a ``RawAnswer`` instead of parsed JSON."""
        return await self._send(
            Call(method, address, path, params, json_body, data, content_type, headers, raw)
        )

    async def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """GET a JSON document from any node (the next one when one does not answer): the
        cluster-wide routes (``/v1/consumer-groups``, ...) with their ``unreachable_nodes``."""
        return await self._run(self.core.any_node("GET", path, params=params))

    async def refresh_routing(self) -> dict[str, Any]:
        return await self._run(self.core.refresh_routing())

    async def cluster(self) -> dict[str, Any]:
        return await self.refresh_routing()

    async def create_topic(
        self, name: str, partitions: int, compression: str = "lz4", retention_hours: float = 168.0
    ) -> dict[str, Any]:
        return await self._run(
            self.core.create_topic(name, partitions, compression, retention_hours)
        )

    async def delete_topic(self, name: str) -> dict[str, Any]:
        """Delete a topic on every node; ``pending_nodes`` names those that did not answer
        (each deletes its copy when it next reads the routing table)."""
        return await self._run(self.core.delete_topic(name))

    async def add_partitions(self, name: str, partitions: int) -> dict[str, Any]:
        """Raise a topic's partition count to ``partitions`` (only up). Keyed messages
        produced afterwards map to ``key_hash(key) % partitions``."""
        return await self._run(self.core.add_partitions(name, partitions))

    async def list_topics(self) -> list[dict[str, Any]]:
        return await self._run(self.core.list_topics())

    async def describe_topic(self, topic: str) -> dict[str, Any]:
        return await self._run(self.core.describe_topic(topic))

    async def produce(self, topic: str, messages: Iterable[Any]) -> list[dict[str, Any]]:
        """Append messages; sub-batches for different nodes travel concurrently."""
        results, failures = await self._run(self.core.produce_partial(topic, messages))
        if failures:
            raise failures[0][1]
        return cast(list[dict[str, Any]], results)  # no failures: every result is there

    async def produce_columns(
        self, topic: str, columns: Any, frame_messages: int = FRAME_MESSAGES
    ) -> Produced:
        """As ``Client.produce_columns``: Arrow / pandas / dict columns, frames in flight
        concurrently."""
        return await self._run(
            self.core.produce_columns(topic, columns_of(columns), frame_messages)
        )

    async def produce_partial(
        self, topic: str, messages: Iterable[Any], sequences: Any = None
    ) -> tuple[list[dict[str, Any] | None], list[tuple[list[int], MsgStoreError]]]:
        """As ``Client.produce_partial``: the results of the stored messages (None for the
        others) and, per refused sub-batch, its message indices and the error."""
        return await self._run(self.core.produce_partial(topic, messages, sequences))

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
        wait_ms: int | None = None,
    ) -> dict[str, Any]:
        params = read_params(offset, max_messages, max_bytes, tag, start_time, end_time, wait_ms)
        return await self._run(self.core.read(topic, partition, params))

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
        wait_ms: int | None = None,
    ) -> ReadColumns:
        """The same page as ``read`` in the binary read framing, decoded to numpy columns."""
        params = read_params(offset, max_messages, max_bytes, tag, start_time, end_time, wait_ms)
        return await self._run(self.core.read_columns(topic, partition, params))

    async def fetch(
        self,
        topic: str,
        positions: dict[int, int],
        max_messages: int = 1000,
        max_bytes: int | None = None,
        wait_ms: int | None = None,
        tag: str | None = None,
    ) -> FetchAnswer:
        """Pages of several partitions at once (see ``Client.fetch``)."""
        return await self._run(
            self.core.fetch(topic, positions, max_messages, max_bytes, wait_ms, tag)
        )

    def _consumer(self, state: ConsumerState, prefetch: bool) -> AsyncConsumer:
        """``consumer`` (ClientBase) for asyncio: ``async for cols in client.consumer(t)``,
        or ``async with`` it, which asks for the topic's offsets at once."""
        return AsyncConsumer(self, state, prefetch)

    async def lookup_key(
        self, topic: str, key: str, begin: int = 0, end: int | None = None, max_count: int = 32
    ) -> dict[str, Any]:
        params = {"begin": begin, "end": end, "max": max_count}
        return await self._run(self.core.lookup_key(topic, key, params))

    async def lookup_key_columns(
        self, topic: str, key: str, begin: int = 0, end: int | None = None, max_count: int = 32
    ) -> ReadColumns:
        """``lookup_key`` in the binary read framing (newest first)."""
        params = {"begin": begin, "end": end, "max": max_count}
        return await self._run(self.core.lookup_key_columns(topic, key, params))

    async def get_message(self, msg_id: str) -> dict[str, Any]:
        return await self._run(self.core.get_message(msg_id))

    async def commit_offset(
        self, group: str, topic: str, partition: int, offset: int
    ) -> dict[str, Any]:
        return await self._run(self.core.commit_offset(group, topic, partition, offset))

    async def committed_offsets(
        self, group: str, topic: str | None = None
    ) -> dict[str, dict[int, int]]:
        return await self._run(self.core.committed_offsets(group, topic))

    async def list_groups(self) -> list[str]:
        """Every consumer group with a committed offset somewhere in the cluster."""
        return await self._run(self.core.list_groups())

    async def read_all(
        self, topic: str, partition: int, offset: int | None = None, page: int = 1000
    ) -> AsyncIterator[dict[str, Any]]:
        """Every message of a partition from ``offset`` to its current end."""
        while True:
            doc = await self.read(topic, partition, offset, max_messages=page)
            for message in doc["messages"]:
                yield message
            if not doc["messages"]:
                return
            offset = doc["next_offset"]

    async def consume(
        self, topic: str, group: str | None = None, page: int = 1000, from_start: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        """As ``Client.consume``: every partition to its current end; with a group, resume
        and commit."""
        info = await self.describe_topic(topic)
        committed = (await self.committed_offsets(group, topic)).get(topic, {}) if group else {}
        for part in info["partition_offsets"]:
            p = part["partition"]
            offset = committed.get(p, part["first_offset"] if from_start else part["next_offset"])
            while True:
                doc = await self.read(topic, p, offset, max_messages=page)
                for message in doc["messages"]:
                    yield message
                if doc["next_offset"] != offset and group:
                    await self.commit_offset(group, topic, p, doc["next_offset"])
                if not doc["messages"]:
                    break
                offset = doc["next_offset"]

    # -- users and ACL rules (super-user only; docs/SECURITY.md) ----------------------------
    async def list_users(self) -> list[dict[str, Any]]:
        """Every user: name, whether it has a token, its certificate subject."""
        return await self._run(users.list_users(self.core))

    async def create_user(
        self, name: str, tls_subject: str | None = None, token: bool = True
    ) -> dict[str, Any]:
        """A new user; the answer's ``token`` is its credential, shown this once."""
        return await self._run(users.create_user(self.core, name, tls_subject, token))

    async def delete_user(self, name: str) -> dict[str, Any]:
        """Delete a user and every rule of it: its token stops working."""
        return await self._run(users.delete_user(self.core, name))

    async def list_acls(self, user: str | None = None) -> list[dict[str, Any]]:
        return await self._run(users.list_acls(self.core, user))

    async def add_acl(
        self, user: str, operation: str, resource: str, name: str, pattern: str = "literal"
    ) -> dict[str, Any]:
        """Allow ``user`` ``operation`` on the topic or group ``name`` (a prefix with
        ``pattern="prefix"``); ``changed`` is false when the rule was there already."""
        body = users.rule(user, operation, resource, name, pattern)
        return await self._run(users.change_acl(self.core, "POST", body))

    async def remove_acl(
        self, user: str, operation: str, resource: str, name: str, pattern: str = "literal"
    ) -> dict[str, Any]:
        body = users.rule(user, operation, resource, name, pattern)
        return await self._run(users.change_acl(self.core, "DELETE", body))

    async def each_node(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """Call every node of the cluster; returns {node_id: answer}."""
        return await self._run(self.core.each_node(method, path, **kw))

    async def files(self) -> dict[str, Any]:
        return await self.each_node("GET", "/v1/admin/files")

    async def compact(self) -> dict[str, Any]:
        return await self.each_node("POST", "/v1/admin/compact")
