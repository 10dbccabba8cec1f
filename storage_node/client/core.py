"""The client's logic, once, without I/O: what to send where, how to read the answer, when to
retry, and where to go after a ``421``.

Every operation is a generator that yields steps (``Call`` an HTTP request, ``Sleep`` a pause,
``Gather`` several operations at once) and receives their outcomes; the blocking ``Client``
and the asyncio ``AsyncClient`` only carry the steps out. A failed ``Call`` is thrown back
into the generator as the server's typed error, so retry and redirect rules read as plain
``try``/``except`` here and exist nowhere else.

The steps and answers are ``steps``; a columns produce's answer is ``produced``.

Over 400 lines on purpose: every client operation's logic lives here once (the point of
the module); each is a short generator, and the retry/redirect rules are shared by all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import numpy as np

from storage_node.client.common import (
    COLUMNS_ACCEPT,
    RoutingCache,
    SequenceSource,
    SubBatch,
    columns_from_answer,
    encode_sub_batch,
    is_retryable,
    key_path,
    normalize_endpoints,
    plan_sub_batches,
    read_params,
    read_path,
    redirect_target,
    resolve_ca,
    results_from_answer,
)
from storage_node.client.consumer_state import ConsumerState
from storage_node.client.fetch import FetchAnswer, decode_fetch_answer, fetch_path, fetch_request
from storage_node.client.out_message import OutMessage, to_out_message
from storage_node.client.packing import Columns, frame_sub_batch, plan_column_batches
from storage_node.client.produced import Produced
from storage_node.client.steps import Call, Gather, Op, RetryPolicy, Sleep
from storage_node.errors import Fenced, MsgStoreError, NotOwner, Unavailable
from storage_node.wire.append_answer import AppendAnswer, decode_append_answer
from storage_node.wire.read_answer import ReadColumns


@dataclass
class ClientCore:
    """State and operations shared by ``Client`` and ``AsyncClient``."""

    endpoints: list[str]
    ca: str | None
    token: str | None
    binary: bool
    routing: RoutingCache
    sequences: SequenceSource
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @classmethod
    def build(
        cls,
        endpoint: str | Iterable[str],
        token: str | None,
        producer_id: str | None,
        max_retries: int,
        binary: bool,
        listener: str,
        ca: str | None,
    ) -> ClientCore:
        resolved = resolve_ca(ca)
        endpoints = normalize_endpoints(endpoint, tls=resolved is not None)
        return cls(
            endpoints,
            resolved,
            token,
            binary,
            RoutingCache(endpoints, listener),
            SequenceSource(producer_id),
            RetryPolicy(max_retries),
        )

    # -- how requests reach nodes -----------------------------------------------------------
    def any_node(self, method: str, path: str, **kw: Any) -> Op[Any]:
        """Ask the nodes in turn until one answers (fail over when one is down)."""
        last: MsgStoreError | None = None
        for attempt in range(self.retry.max_retries):
            for address in self.routing.node_addresses() + self.endpoints:
                try:
                    return (yield Call(method, address, path, **kw))
                except MsgStoreError as err:
                    if not is_retryable(err):
                        raise
                    last = err
            yield Sleep(self.retry.sweep_delay(attempt))
        raise last or Unavailable("no node answered")

    def owner_call(self, topic: str, partition: int, method: str, path: str, **kw: Any) -> Op[Any]:
        """Send to the partition's owner, following 421 redirects and retrying outages."""
        if self.routing.partitions(topic) is None:
            yield from self.refresh_routing()
        owner = self.routing.owner(topic, partition)
        address = owner[1] if owner else self.endpoints[0]
        for attempt in range(self.retry.max_retries + 1):
            try:
                return (yield Call(method, address, path, **kw))
            except NotOwner as err:
                yield from self.refresh_routing()
                target = redirect_target(err, self.routing)
                if target is None:
                    raise
                address = target
            except MsgStoreError as err:
                if not is_retryable(err):
                    raise
                yield Sleep(self.retry.delay(attempt))
                if owner is not None and isinstance(err, Unavailable | Fenced):
                    address = yield from self.leader_address(owner[0], address)
        return (yield Call(method, address, path, **kw))

    def leader_address(self, owner: str, address: str) -> Op[str]:
        """(After an outage or a ``fenced`` answer.) The owner's address in a fresh routing
        table: a replicated log's new leader, where the same request (same producer id and
        sequence) goes next (docs/REPLICATION.md)."""
        table = self.routing.table
        if table is None or not table.logs:
            return address
        try:
            yield from self.refresh_routing()
        except MsgStoreError:
            return address
        assert self.routing.table is not None
        return self.routing.address_of(self.routing.table.leader_of(owner)) or address

    def each_node(self, method: str, path: str, **kw: Any) -> Op[dict[str, Any]]:
        """Call every node of the cluster; returns {node_id: answer}."""
        yield from self.refresh_routing()
        assert self.routing.table is not None
        listener = self.routing.listener_in_use()
        out: dict[str, Any] = {}
        for n in self.routing.table.nodes:
            out[n.id] = yield Call(method, n.address_for(listener), path, **kw)
        return out

    # -- cluster and topics -------------------------------------------------------------------
    def refresh_routing(self) -> Op[dict[str, Any]]:
        doc = yield from self.any_node("GET", "/v1/cluster")
        self.routing.update(doc)
        return doc

    def create_topic(
        self, name: str, partitions: int, compression: str, retention_hours: float
    ) -> Op[dict[str, Any]]:
        body = {
            "name": name,
            "partitions": partitions,
            "compression": compression,
            "retention_hours": retention_hours,
        }
        doc = yield from self.any_node("POST", "/v1/topics", json_body=body)
        yield from self.refresh_routing()
        return doc

    def delete_topic(self, name: str) -> Op[dict[str, Any]]:
        doc = yield from self.any_node("DELETE", f"/v1/topics/{quote(name, safe='')}")
        yield from self.refresh_routing()
        return doc

    def add_partitions(self, name: str, partitions: int) -> Op[dict[str, Any]]:
        path = f"/v1/topics/{quote(name, safe='')}/partitions"
        doc = yield from self.any_node("POST", path, json_body={"partitions": partitions})
        yield from self.refresh_routing()
        return doc

    def list_topics(self) -> Op[list[dict[str, Any]]]:
        return (yield from self.any_node("GET", "/v1/topics"))["topics"]

    def describe_topic(self, topic: str) -> Op[dict[str, Any]]:
        return (yield from self.any_node("GET", f"/v1/topics/{quote(topic, safe='')}"))

    # -- produce ------------------------------------------------------------------------------
    def produce_partial(
        self, topic: str, messages: Iterable[Any], sequences: Any = None
    ) -> Op[tuple[list[dict[str, Any] | None], list[tuple[list[int], MsgStoreError]]]]:
        """Results of the stored messages (None for the others) and, per refused sub-batch,
        the indices of its messages and the error (nothing of a refused sub-batch is stored,
        unless its error says ``maybe_sent``). Messages free to go anywhere (no key, no
        partition) whose node refuses connections go to the partitions of the other nodes.
        ``sequences``: where the sub-batches' sequence numbers come from (default: this
        client's)."""
        out = [to_out_message(m, i) for i, m in enumerate(messages)]
        if not out:
            return [], []
        if self.routing.partitions(topic) is None:
            yield from self.refresh_routing()
        sequences = sequences or self.sequences
        results: list[Any] = [None] * len(out)
        failures: list[tuple[list[int], MsgStoreError]] = []
        pending = plan_sub_batches(
            self.routing, sequences, topic, out, list(range(len(out))), self.endpoints[0]
        )
        for _round in range(self.retry.max_retries + 2):
            for batch in pending:
                encode_sub_batch(batch, self.producer_id, self.binary)
            outcomes = yield from self._send_all(topic, pending)
            replan: list[tuple[OutMessage, int]] = []
            for batch, outcome in zip(pending, outcomes, strict=True):
                if isinstance(outcome, NotOwner):
                    replan.extend(zip(batch.messages, batch.indices, strict=True))
                elif self._moves_on(topic, batch, outcome):
                    for m in batch.messages:
                        m.partition = None  # free again: planned over the live nodes
                    replan.extend(zip(batch.messages, batch.indices, strict=True))
                elif isinstance(outcome, MsgStoreError):
                    outcome.details.setdefault("sequence", batch.sequence)  # to resend it
                    if batch.maybe_sent:
                        outcome.details["maybe_sent"] = True
                    failures.append((list(batch.indices), outcome))
                else:
                    for index, result in zip(batch.indices, outcome, strict=True):
                        results[index] = result
            if not replan:
                return results, failures
            yield from self.refresh_routing()
            pending = plan_sub_batches(
                self.routing,
                sequences,
                topic,
                [m for m, _ in replan],
                [i for _, i in replan],
                self.endpoints[0],
            )
        raise Unavailable(f"the nodes of topic {topic!r} kept failing while producing")

    def _moves_on(self, topic: str, batch: SubBatch, outcome: Any) -> bool:
        """A sub-batch of freely placed messages that surely reached no node (every attempt
        found the connection refused) goes elsewhere, its node marked down for a while
        (when another node serves a partition of the topic)."""
        if not (batch.movable and isinstance(outcome, Unavailable) and not batch.maybe_sent):
            return False
        self.routing.mark_down(batch.address)
        owners = (self.routing.owner(topic, p) for p in self.routing.live_partitions(topic))
        return any(o is not None and o[1] != batch.address for o in owners)

    def _send_all(self, topic: str, pending: list[SubBatch]) -> Op[list[Any]]:
        if len(pending) == 1:
            try:
                return [(yield from self.send_sub_batch(topic, pending[0]))]
            except MsgStoreError as err:
                return [err]
        return (yield Gather([self.send_sub_batch(topic, b) for b in pending]))

    def send_sub_batch(self, topic: str, batch: SubBatch, columns: bool = False) -> Op[Any]:
        """Send with retries (same body, same sequence); a 421 is returned for re-planning.
        ``columns``: ask for the binary append answer (an ``AppendAnswer``)."""
        path = f"/v1/topics/{quote(topic, safe='')}/messages"
        while True:
            batch.attempts += 1
            try:
                if columns:
                    raw = yield Call(
                        "POST",
                        batch.address,
                        path,
                        data=batch.body,
                        content_type=batch.content_type,
                        headers=COLUMNS_ACCEPT,
                        raw=True,
                    )
                    return decode_append_answer(raw.content)
                answer = yield Call(
                    "POST", batch.address, path, data=batch.body, content_type=batch.content_type
                )
                return results_from_answer(batch, answer)
            except NotOwner as err:
                table = self.routing.table
                if (
                    table is not None
                    and batch.node_id in table.logs
                    and batch.attempts <= self.retry.max_retries
                ):
                    # a replicated log's leader moved (the node asked has not yet taken the
                    # new table, or no longer leads): the same body and sequence go to the
                    # log's leader, so an earlier attempt that was written is recognised
                    # by the idempotency table instead of written again under a new sequence
                    yield Sleep(self.retry.delay(batch.attempts - 1))
                    batch.address = yield from self.leader_address(batch.node_id, batch.address)
                    continue
                if redirect_target(err) is None or batch.attempts > self.retry.max_retries:
                    raise
                return err
            except MsgStoreError as err:
                if err.details.get("sent") is not False and (
                    isinstance(err, Unavailable) or err.status >= 500
                ):
                    batch.maybe_sent = True  # the body may have reached the node
                elif batch.movable and isinstance(err, Unavailable) and not batch.maybe_sent:
                    raise  # refused, nothing sent: its messages go to another node instead
                if not is_retryable(err) or batch.attempts > self.retry.max_retries:
                    raise
                yield Sleep(self.retry.delay(batch.attempts - 1))
                if isinstance(err, Unavailable | Fenced):  # a replicated log's leader moved
                    batch.address = yield from self.leader_address(batch.node_id, batch.address)

    def produce_columns(self, topic: str, cols: Columns, batch_size: int) -> Op[Produced]:
        """Columns sent as frames packed straight from arrays, the frames of one call sent
        concurrently (each encoded by the worker that sends it, so encoding overlaps the
        transfers); a 421 re-plans the refused frame's rows on the fresh routing table."""
        if self.routing.partitions(topic) is None:
            yield from self.refresh_routing()
        plan = plan_column_batches(
            self.routing, self.sequences, topic, cols, batch_size, self.endpoints[0]
        )
        pending = list(zip(plan.sub_batches, plan.rows, strict=True))
        done: list[tuple[np.ndarray, AppendAnswer]] = []
        for _round in range(self.retry.max_retries + 1):
            if len(pending) == 1:
                try:
                    outcomes: list[Any] = [(yield from self.send_frame(topic, pending[0][0]))]
                except MsgStoreError as err:
                    outcomes = [err]
            else:
                outcomes = yield Gather([self.send_frame(topic, b) for b, _ in pending])
            redo: list[np.ndarray] = []
            for (_, rows), outcome in zip(pending, outcomes, strict=True):
                if isinstance(outcome, NotOwner):
                    redo.append(rows)
                elif isinstance(outcome, MsgStoreError):
                    raise outcome
                else:
                    done.append((rows, outcome))
            if not redo:
                return Produced.assemble(len(cols), done)
            yield from self.refresh_routing()
            again = np.concatenate(redo)
            plan = plan_column_batches(
                self.routing,
                self.sequences,
                topic,
                cols.take(again),
                batch_size,
                self.endpoints[0],
                rows=again,
            )
            pending = list(zip(plan.sub_batches, plan.rows, strict=True))
        raise Unavailable(f"the owners of topic {topic!r} kept moving while producing")

    def send_frame(self, topic: str, batch: SubBatch) -> Op[Any]:
        frame_sub_batch(batch, self.producer_id)
        return (yield from self.send_sub_batch(topic, batch, columns=True))

    @property
    def producer_id(self) -> str:
        return self.sequences.producer_id

    # -- reads and lookups --------------------------------------------------------------------
    def read(self, topic: str, partition: int, params: dict[str, Any]) -> Op[dict[str, Any]]:
        return (
            yield from self.owner_call(
                topic, partition, "GET", read_path(topic, partition), params=params
            )
        )

    def read_columns(self, topic: str, partition: int, params: dict[str, Any]) -> Op[ReadColumns]:
        answer = yield from self.owner_call(
            topic,
            partition,
            "GET",
            read_path(topic, partition),
            params=params,
            headers=COLUMNS_ACCEPT,
            raw=True,
        )
        return columns_from_answer(answer.headers.get("Content-Type"), answer.content)

    def fetch(
        self,
        topic: str,
        positions: Mapping[int, int],
        max_messages: int,
        max_bytes: int | None,
        wait_ms: int | None,
        tag: str | None = None,
    ) -> Op[FetchAnswer]:
        """Pages of several partitions at once: one request per owning node, the nodes asked
        concurrently; a partition whose owner moved is asked again at its new owner."""
        if self.routing.partitions(topic) is None:
            yield from self.refresh_routing()
        by_node: dict[str, dict[int, int]] = {}
        for p, offset in positions.items():
            owner = self.routing.owner(topic, p)
            by_node.setdefault(owner[1] if owner else self.endpoints[0], {})[p] = offset
        ops = [
            self._fetch_one(topic, address, share, max_messages, max_bytes, wait_ms, tag)
            for address, share in by_node.items()
        ]
        if len(ops) == 1:
            answers: list[Any] = [(yield from ops[0])]
        else:
            answers = yield Gather(ops)
        merged = FetchAnswer({})
        for answer in answers:
            if isinstance(answer, MsgStoreError):
                raise answer
            merged.pages.update(answer.pages)
        return merged

    def _fetch_one(
        self,
        topic: str,
        address: str,
        positions: dict[int, int],
        max_messages: int,
        max_bytes: int | None,
        wait_ms: int | None,
        tag: str | None,
    ) -> Op[FetchAnswer]:
        body = fetch_request(positions, max_messages, max_bytes, wait_ms, tag)
        for attempt in range(self.retry.max_retries + 1):
            try:
                answer = yield Call(
                    "POST",
                    address,
                    fetch_path(topic),
                    json_body=body,
                    headers=COLUMNS_ACCEPT,
                    raw=True,
                )
                return decode_fetch_answer(answer.headers.get("Content-Type"), answer.content)
            except NotOwner:
                # ask each partition's owner on its own (ownership moved under us)
                yield from self.refresh_routing()
                pages: dict[int, ReadColumns] = {}
                for p, offset in positions.items():
                    params = read_params(offset, max_messages, max_bytes, tag, None, None)
                    pages[p] = yield from self.read_columns(topic, p, params)
                return FetchAnswer(pages)
            except MsgStoreError as err:
                if not is_retryable(err) or attempt >= self.retry.max_retries:
                    raise
                yield Sleep(self.retry.delay(attempt))
        raise Unavailable(f"no answer from {address}")

    def place_consumer(self, state: ConsumerState) -> Op[ConsumerState]:
        """A consumer's start: the topic's partition offsets when its range is not given."""
        if not state.placed:
            info = yield from self.describe_topic(state.topic)
            state.place({p["partition"]: p for p in info["partition_offsets"]})
        return state

    def consume(self, state: ConsumerState) -> Op[FetchAnswer | None]:
        """A consumer's next fetch (None: every range is read), its positions moved on."""
        ask = state.next_fetch()
        if ask is None:
            return None
        wanted, page = ask
        wait_ms = state.wait_ms if state.follow else None
        answer = yield from self.fetch(
            state.topic, wanted, page, state.max_bytes, wait_ms, state.tag
        )
        state.fetched(answer)
        return answer

    def lookup_key(self, topic: str, key: str, params: dict[str, Any]) -> Op[dict[str, Any]]:
        return (yield from self.any_node("GET", key_path(topic, key), params=params))

    def lookup_key_columns(self, topic: str, key: str, params: dict[str, Any]) -> Op[ReadColumns]:
        answer = yield from self.any_node(
            "GET", key_path(topic, key), params=params, headers=COLUMNS_ACCEPT, raw=True
        )
        return columns_from_answer(answer.headers.get("Content-Type"), answer.content)

    def get_message(self, msg_id: str) -> Op[dict[str, Any]]:
        return (yield from self.any_node("GET", f"/v1/messages/{quote(msg_id, safe='')}"))

    # -- consumer groups ----------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> Op[Any]:
        body = {"topic": topic, "partition": partition, "offset": offset}
        path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
        return (yield from self.owner_call(topic, partition, "POST", path, json_body=body))

    def list_groups(self) -> Op[list[str]]:
        return list((yield from self.any_node("GET", "/v1/consumer-groups"))["groups"])

    def committed_offsets(self, group: str, topic: str | None) -> Op[dict[str, dict[int, int]]]:
        path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
        doc = yield from self.any_node("GET", path, params={"topic": topic})
        return {t: {int(p): o for p, o in parts.items()} for t, parts in doc["offsets"].items()}
