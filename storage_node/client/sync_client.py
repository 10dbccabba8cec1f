"""Blocking client: runs the shared operations (client/core.py) over keep-alive HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

from storage_node.client import users
from storage_node.client.client_base import ClientBase
from storage_node.client.common import check_scheme, read_params
from storage_node.client.consumer import Consumer
from storage_node.client.consumer_state import ConsumerState
from storage_node.client.fetch import FetchAnswer
from storage_node.client.packing import columns_of, columns_of_dicts
from storage_node.client.produced import Produced
from storage_node.client.steps import Call, Gather, Op, Sleep, T
from storage_node.client.transport import HttpTransport
from storage_node.errors import MsgStoreError
from storage_node.wire.read_answer import ReadColumns

FRAME_MESSAGES = 5000  # messages per frame of a columns produce
PIECE_MESSAGES = 20_000  # a long list of dicts is packed and sent in pieces this size
SENDERS = 4  # frames of one produce call in flight at once


class Client(ClientBase[Consumer]):
    """Talks to a msgstore cluster through any of its nodes.

    ``producer_id`` fixes the idempotency identity (default: random per client); every
    sub-batch sent to a node carries (producer_id, next sequence), reused on each retry, so a
    resend after a lost answer or a node restart never writes twice. ``listener`` chooses the
    nodes' internal or external addresses (``auto``: external when ``endpoint`` is one).
    """

    def _open(self, timeout: float) -> None:
        self.timeout = timeout
        self._transport = HttpTransport(timeout, self.core.ca, self.token)
        self._pool: ThreadPoolExecutor | None = None
        self._pieces: ThreadPoolExecutor | None = None

    # -- running operations ---------------------------------------------------------------
    def _send(self, call: Call) -> Any:
        check_scheme(call.address, self.core.ca is not None)
        return self._transport.send(call)

    def _run(self, op: Op[T]) -> T:
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
                    outcome = self._send(step)
                elif isinstance(step, Sleep):
                    time.sleep(step.seconds)
                elif isinstance(step, Gather):
                    outcome = self._gather(step)
            except MsgStoreError as err:
                failure = err

    def _gather(self, step: Gather) -> list[Any]:
        def attempt(op: Op[Any]) -> Any:
            try:
                return self._run(op)
            except MsgStoreError as err:
                return err

        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=max(8, SENDERS))
        return list(self._pool.map(attempt, step.ops))

    def request(
        self,
        method: str,
        address: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        content_type: str | None = None,
        params: dict[str, Any] | None = None,
        raw: bool = False,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """One HTTP call; raises the server's typed error, Unavailable when unreachable.
        ``raw`` answers a ``RawAnswer`` (``status_code``, ``headers``, ``content``)."""
        return self._send(
            Call(method, address, path, params, json_body, data, content_type, headers, raw)
        )

    # -- cluster and topics -------------------------------------------------------------
    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """GET a JSON document from any node (the next one when one does not answer): the
        cluster-wide routes (``/v1/consumer-groups``, ...) with their ``unreachable_nodes``."""
        return self._run(self.core.any_node("GET", path, params=params))

    def refresh_routing(self) -> dict[str, Any]:
        return self._run(self.core.refresh_routing())

    def cluster(self) -> dict[str, Any]:
        return self.refresh_routing()

    def create_topic(
        self,
        name: str,
        partitions: int,
        compression: str = "lz4",
        retention_hours: float = 168.0,
    ) -> dict[str, Any]:
        return self._run(self.core.create_topic(name, partitions, compression, retention_hours))

    def delete_topic(self, name: str) -> dict[str, Any]:
        """Delete a topic on every node; ``pending_nodes`` names those that did not answer
        (each deletes its copy when it next reads the routing table)."""
        return self._run(self.core.delete_topic(name))

    def add_partitions(self, name: str, partitions: int) -> dict[str, Any]:
        """Raise a topic's partition count to ``partitions`` (only up). Keyed messages
        produced afterwards map to ``key_hash(key) % partitions``."""
        return self._run(self.core.add_partitions(name, partitions))

    def list_topics(self) -> list[dict[str, Any]]:
        return self._run(self.core.list_topics())

    def describe_topic(self, topic: str) -> dict[str, Any]:
        return self._run(self.core.describe_topic(topic))

    # -- produce --------------------------------------------------------------------------
    def produce(self, topic: str, messages: Iterable[Any]) -> list[dict[str, Any]]:
        """Append messages; returns one {"partition", "offset", "msg_id"} per message, in order.

        Messages may be bytes, str, dicts shaped like the JSON API, or OutMessage objects.
        A list of plain dicts takes the columns path (``produce_columns``). A sub-batch the
        cluster refuses raises its error (sub-batches sent to other nodes may be stored:
        ``produce_partial`` says which).
        """
        items = messages if isinstance(messages, list) else list(messages)
        if self.core.binary and len(items) > 1:
            produced = self._produce_dicts(topic, items)
            if produced is not None:
                return produced
        results, failures = self.produce_partial(topic, items)
        if failures:
            raise failures[0][1]
        return cast(list[dict[str, Any]], results)  # no failures: every result is there

    def _produce_dicts(self, topic: str, items: list[Any]) -> list[dict[str, Any]] | None:
        """Plain message dicts as columns, in pieces: a piece is in flight while the next
        one is turned into columns (None when the items are not all plain dicts)."""
        pieces = range(0, len(items), PIECE_MESSAGES)
        first = columns_of_dicts(items[:PIECE_MESSAGES])
        if first is None:
            return None
        if self._pieces is None:
            self._pieces = ThreadPoolExecutor(2, "msgstore-produce")
        futures: list[Future[Any]] = []
        for lo in pieces:
            cols = first if lo == 0 else columns_of_dicts(items[lo : lo + PIECE_MESSAGES])
            op: Op[Any]
            if cols is None:  # a later piece that is not plain dicts: the general path
                op = self.core.produce_partial(topic, items[lo : lo + PIECE_MESSAGES])
            else:
                op = self.core.produce_columns(topic, cols, FRAME_MESSAGES)
            futures.append(self._pieces.submit(self._run, op))
        out: list[dict[str, Any]] = []
        for future in futures:
            done = future.result()
            if isinstance(done, Produced):
                out.extend(done.to_rows())
                continue
            results: list[dict[str, Any] | None] = done[0]
            failures: list[tuple[list[int], MsgStoreError]] = done[1]
            if failures:
                raise failures[0][1]
            out.extend(r for r in results if r is not None)
        return out

    def produce_columns(
        self, topic: str, columns: Any, frame_messages: int = FRAME_MESSAGES
    ) -> Produced:
        """Append the rows of an Arrow table or record batch, a pandas DataFrame or a dict of
        columns (``value`` and optionally ``key``, ``tag``, ``msg_id``, ``timestamp``,
        ``partition``): frames are packed from the arrays and sent concurrently; the answer
        holds partitions and offsets as arrays."""
        return self._run(self.core.produce_columns(topic, columns_of(columns), frame_messages))

    def produce_partial(
        self, topic: str, messages: Iterable[Any], sequences: Any = None
    ) -> tuple[list[dict[str, Any] | None], list[tuple[list[int], MsgStoreError]]]:
        """``produce`` that reports instead of raising: the result of every stored message
        (None for the others) and, per refused sub-batch, the indices of its messages and
        the error (nothing of a refused sub-batch is stored; the others are). ``sequences``:
        where the sub-batches' sequence numbers come from (default: this client's), so a
        resend of the same batch under the same producer id is stored once."""
        return self._run(self.core.produce_partial(topic, messages, sequences))

    # -- reads and lookups ----------------------------------------------------------------
    def read(
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
        """One page of a partition: {"messages": [...], "next_offset": n}. With ``wait_ms``
        the node holds an empty answer until a message arrives or the time is up."""
        params = read_params(offset, max_messages, max_bytes, tag, start_time, end_time, wait_ms)
        return self._run(self.core.read(topic, partition, params))

    def read_columns(
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
        """The same page as ``read`` in the binary read framing, decoded to numpy columns
        (no JSON or base64 per message; ``to_rows(topic)`` gives dicts when wanted)."""
        params = read_params(offset, max_messages, max_bytes, tag, start_time, end_time, wait_ms)
        return self._run(self.core.read_columns(topic, partition, params))

    def fetch(
        self,
        topic: str,
        positions: dict[int, int],
        max_messages: int = 1000,
        max_bytes: int | None = None,
        wait_ms: int | None = None,
        tag: str | None = None,
    ) -> FetchAnswer:
        """Pages of several partitions ({partition: offset}) with one request per owning
        node; with ``wait_ms`` a node holds its answer until one of them has a message."""
        return self._run(self.core.fetch(topic, positions, max_messages, max_bytes, wait_ms, tag))

    def _consumer(self, state: ConsumerState, prefetch: bool) -> Consumer:
        return Consumer(self, state, prefetch)

    def read_all(
        self, topic: str, partition: int, offset: int | None = None, page: int = 1000
    ) -> Iterator[dict[str, Any]]:
        """Every message of a partition from ``offset`` to its current end."""
        while True:
            doc = self.read(topic, partition, offset, max_messages=page)
            yield from doc["messages"]
            if not doc["messages"]:
                return
            offset = doc["next_offset"]

    def lookup_key(
        self, topic: str, key: str, begin: int = 0, end: int | None = None, max_count: int = 32
    ) -> dict[str, Any]:
        params = {"begin": begin, "end": end, "max": max_count}
        return self._run(self.core.lookup_key(topic, key, params))

    def lookup_key_columns(
        self, topic: str, key: str, begin: int = 0, end: int | None = None, max_count: int = 32
    ) -> ReadColumns:
        """``lookup_key`` in the binary read framing (newest first; ``limit_reached`` and
        ``meta["unreachable_nodes"]`` as in the JSON answer)."""
        params = {"begin": begin, "end": end, "max": max_count}
        return self._run(self.core.lookup_key_columns(topic, key, params))

    def get_message(self, msg_id: str) -> dict[str, Any]:
        return self._run(self.core.get_message(msg_id))

    # -- consumer groups ------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> dict[str, Any]:
        return self._run(self.core.commit_offset(group, topic, partition, offset))

    def list_groups(self) -> list[str]:
        """Every consumer group with a committed offset somewhere in the cluster."""
        return self._run(self.core.list_groups())

    def committed_offsets(self, group: str, topic: str | None = None) -> dict[str, dict[int, int]]:
        return self._run(self.core.committed_offsets(group, topic))

    def consume(
        self, topic: str, group: str | None = None, page: int = 1000, from_start: bool = True
    ) -> Iterator[dict[str, Any]]:
        """Read every partition to its current end; with a group, resume and commit."""
        info = self.describe_topic(topic)
        committed = self.committed_offsets(group, topic).get(topic, {}) if group else {}
        for part in info["partition_offsets"]:
            p = part["partition"]
            offset = committed.get(p, part["first_offset"] if from_start else part["next_offset"])
            while True:
                doc = self.read(topic, p, offset, max_messages=page)
                yield from doc["messages"]
                if doc["next_offset"] != offset and group:
                    self.commit_offset(group, topic, p, doc["next_offset"])
                if not doc["messages"]:
                    break
                offset = doc["next_offset"]

    # -- users and ACL rules (super-user only; docs/SECURITY.md) ----------------------------
    def list_users(self) -> list[dict[str, Any]]:
        """Every user: name, whether it has a token, its certificate subject."""
        return self._run(users.list_users(self.core))

    def create_user(
        self, name: str, tls_subject: str | None = None, token: bool = True
    ) -> dict[str, Any]:
        """A new user; the answer's ``token`` is its credential, shown this once."""
        return self._run(users.create_user(self.core, name, tls_subject, token))

    def delete_user(self, name: str) -> dict[str, Any]:
        """Delete a user and every rule of it: its token stops working."""
        return self._run(users.delete_user(self.core, name))

    def list_acls(self, user: str | None = None) -> list[dict[str, Any]]:
        return self._run(users.list_acls(self.core, user))

    def add_acl(
        self, user: str, operation: str, resource: str, name: str, pattern: str = "literal"
    ) -> dict[str, Any]:
        """Allow ``user`` ``operation`` on the topic or group ``name`` (a prefix with
        ``pattern="prefix"``); ``changed`` is false when the rule was there already."""
        body = users.rule(user, operation, resource, name, pattern)
        return self._run(users.change_acl(self.core, "POST", body))

    def remove_acl(
        self, user: str, operation: str, resource: str, name: str, pattern: str = "literal"
    ) -> dict[str, Any]:
        body = users.rule(user, operation, resource, name, pattern)
        return self._run(users.change_acl(self.core, "DELETE", body))

    # -- admin ----------------------------------------------------------------------------
    def each_node(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """Call every node of the cluster; returns {node_id: answer}."""
        return self._run(self.core.each_node(method, path, **kw))

    def files(self) -> dict[str, Any]:
        return self.each_node("GET", "/v1/admin/files")

    def compact(self) -> dict[str, Any]:
        return self.each_node("POST", "/v1/admin/compact")

    def close(self) -> None:
        for pool in (self._pool, self._pieces):
            if pool is not None:
                pool.shutdown(wait=False)
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
