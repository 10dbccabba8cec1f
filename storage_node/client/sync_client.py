"""Blocking client (requests): routing-aware produce with safe retries, reads, lookups."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import requests

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
from storage_node.errors import Fenced, MsgStoreError, NotOwner, Unavailable
from storage_node.server.batch_codec import ReadColumns


class _Refused:
    """A sub-batch the cluster refused (its error), as an outcome rather than a raise."""

    def __init__(self, error: MsgStoreError) -> None:
        self.error = error


class Client:
    """Talks to a msgstore cluster through any of its nodes.

    ``producer_id`` fixes the idempotency identity (default: random per client); every
    sub-batch sent to a node carries (producer_id, next sequence), reused on each retry, so a
    resend after a lost answer or a node restart never writes twice. ``listener`` chooses the
    nodes' internal or external addresses (``auto``: external when ``endpoint`` is one).
    """

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
        # ca: CA bundle (PEM file) that node certificates must verify against; default env
        # MSGSTORE_CA. With one, every address must be https.
        self.ca = resolve_ca(ca)
        self.endpoints = normalize_endpoints(endpoint, tls=self.ca is not None)
        self.token = token
        self.timeout = timeout
        self.max_retries = max_retries
        self.binary = binary
        self.routing = RoutingCache(self.endpoints, listener)
        self.sequences = SequenceSource(producer_id)
        self._local = threading.local()
        self._pool: ThreadPoolExecutor | None = None

    @property
    def producer_id(self) -> str:
        return self.sequences.producer_id

    # -- transport ----------------------------------------------------------------------
    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.headers.update(auth_headers(self.token))
            self._local.session = session
        return session

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
        """One HTTP call; raises the server's typed error, Unavailable when unreachable."""
        check_scheme(address, self.ca is not None)
        hdrs = dict(headers or {})
        if content_type:
            hdrs["Content-Type"] = content_type
        try:
            resp = self._session().request(
                method,
                address + path,
                json=json_body,
                data=data,
                params={k: v for k, v in (params or {}).items() if v is not None},
                headers=hdrs,
                timeout=self.timeout,
                # Per request: requests lets REQUESTS_CA_BUNDLE override a session's verify.
                verify=self.ca or True,
            )
        except requests.exceptions.SSLError as exc:
            raise TlsError(f"TLS with {address} failed: {exc}", address=address) from None
        except requests.RequestException as exc:
            raise Unavailable(f"cannot reach {address}: {exc}", address=address) from None
        if resp.status_code >= 400:
            try:
                body = resp.json()
            except ValueError:
                body = resp.text
            raise error_from_response(resp.status_code, body)
        if raw:
            return resp
        return resp.json()

    def _any_node(self, method: str, path: str, **kwargs: Any) -> Any:
        """Ask the nodes in turn until one answers (fail over when one is down)."""
        last: BaseException | None = None
        for attempt in range(self.max_retries):
            for address in self.routing.node_addresses() + self.endpoints:
                try:
                    return self.request(method, address, path, **kwargs)
                except MsgStoreError as err:
                    if not is_retryable(err):
                        raise
                    last = err
            time.sleep(min(0.05 * 2**attempt, 1.0))
        raise last or Unavailable("no node answered")

    # -- cluster and topics -------------------------------------------------------------
    def refresh_routing(self) -> dict[str, Any]:
        doc = self._any_node("GET", "/v1/cluster")
        self.routing.update(doc)
        return doc

    def cluster(self) -> dict[str, Any]:
        return self.refresh_routing()

    def create_topic(
        self,
        name: str,
        partitions: int,
        compression: str = "lz4",
        retention_hours: float = 168.0,
    ) -> dict[str, Any]:
        body = {
            "name": name,
            "partitions": partitions,
            "compression": compression,
            "retention_hours": retention_hours,
        }
        doc = self._any_node("POST", "/v1/topics", json_body=body)
        self.refresh_routing()
        return doc

    def list_topics(self) -> list[dict[str, Any]]:
        return self._any_node("GET", "/v1/topics")["topics"]

    def describe_topic(self, topic: str) -> dict[str, Any]:
        return self._any_node("GET", f"/v1/topics/{quote(topic, safe='')}")

    # -- produce --------------------------------------------------------------------------
    def produce(self, topic: str, messages: Iterable[Any]) -> list[dict[str, Any]]:
        """Append messages; returns one {"partition", "offset", "msg_id"} per message, in order.

        Messages may be bytes, str, dicts shaped like the JSON API, or OutMessage objects.
        A sub-batch the cluster refuses raises its error (sub-batches sent to other nodes
        may be stored: ``produce_partial`` says which).
        """
        results, failures = self.produce_partial(topic, messages)
        if failures:
            raise failures[0][1]
        stored = [r for r in results if r is not None]
        assert len(stored) == len(results)  # no sub-batch refused: every message has its result
        return stored

    def produce_partial(
        self, topic: str, messages: Iterable[Any]
    ) -> tuple[list[dict[str, Any] | None], list[tuple[list[int], MsgStoreError]]]:
        """``produce`` that reports instead of raising: the result of every stored message
        (None for the others) and, per refused sub-batch, the indices of its messages and
        the error (nothing of a refused sub-batch is stored; the others are)."""
        out = [to_out_message(m) for m in messages]
        if not out:
            return [], []
        if self.routing.partitions(topic) is None:
            self.refresh_routing()
        results: list[Any] = [None] * len(out)
        failures: list[tuple[list[int], MsgStoreError]] = []
        pending = plan_sub_batches(
            self.routing, self.sequences, topic, out, list(range(len(out))), self.endpoints[0]
        )

        def attempt(batch: SubBatch) -> Any:
            try:
                return self._send_sub_batch(topic, batch)
            except MsgStoreError as err:
                return _Refused(err)

        while pending:
            for batch in pending:
                encode_sub_batch(batch, self.producer_id, self.binary)
            if len(pending) == 1:
                outcomes = [attempt(pending[0])]
            else:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=8)
                outcomes = list(self._pool.map(attempt, pending))
            replan: list[tuple[OutMessage, int]] = []
            for batch, outcome in zip(pending, outcomes, strict=True):
                if isinstance(outcome, NotOwner):
                    replan.extend(zip(batch.messages, batch.indices, strict=True))
                    continue
                if isinstance(outcome, _Refused):
                    failures.append((list(batch.indices), outcome.error))
                    continue
                for index, result in zip(batch.indices, outcome, strict=True):
                    results[index] = result
            pending = []
            if replan:
                self.refresh_routing()
                msgs = [m for m, _ in replan]
                pending = plan_sub_batches(
                    self.routing,
                    self.sequences,
                    topic,
                    msgs,
                    [i for _, i in replan],
                    self.endpoints[0],
                )
        return results, failures

    def _send_sub_batch(self, topic: str, batch: SubBatch) -> Any:
        """Send with retries (same body, same sequence); a 421 is returned for re-planning."""
        path = f"/v1/topics/{quote(topic, safe='')}/messages"
        delay = 0.05
        while True:
            batch.attempts += 1
            try:
                answer = self.request(
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
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                if isinstance(err, Unavailable | Fenced):  # a replicated log's leader moved:
                    batch.address = self._leader_address(batch.node_id, batch.address)

    # -- reads and lookups ----------------------------------------------------------------
    def _owner_request(self, topic: str, partition: int, method: str, path: str, **kw: Any) -> Any:
        """Send to the partition's owner, following 421 redirects and retrying outages."""
        if self.routing.partitions(topic) is None:
            self.refresh_routing()
        owner = self.routing.owner(topic, partition)
        address = owner[1] if owner else self.endpoints[0]
        delay = 0.05
        for _attempt in range(self.max_retries + 1):
            try:
                return self.request(method, address, path, **kw)
            except NotOwner as err:
                self.refresh_routing()
                target = redirect_target(err, self.routing)
                if target is None:
                    raise
                address = target
            except MsgStoreError as err:
                if not is_retryable(err):
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                if isinstance(err, Unavailable | Fenced) and owner is not None:
                    address = self._leader_address(owner[0], address)
        return self.request(method, address, path, **kw)

    def _leader_address(self, owner: str, address: str) -> str:
        """(After an outage.) The owner's address in a fresh routing table: a replicated
        log's new leader, where the same request (same producer id and sequence) goes."""
        if self.routing.table is None or not self.routing.table.logs:
            return address
        try:
            self.refresh_routing()
        except MsgStoreError:
            return address
        table = self.routing.table
        return self.routing.address_of(table.leader_of(owner)) or address

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
        return self._owner_request(
            topic, partition, "GET", read_path(topic, partition), params=params
        )

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
    ) -> ReadColumns:
        """The same page as ``read`` in the binary read framing, decoded to numpy columns
        (no JSON or base64 per message; ``to_rows(topic)`` gives dicts when wanted)."""
        params = read_params(offset, max_messages, max_bytes, tag, start_time, end_time)
        resp = self._owner_request(
            topic,
            partition,
            "GET",
            read_path(topic, partition),
            params=params,
            headers=COLUMNS_ACCEPT,
            raw=True,
        )
        return columns_from_answer(resp.headers.get("Content-Type"), resp.content)

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
        return self._any_node("GET", key_path(topic, key), params=params)

    def lookup_key_columns(
        self, topic: str, key: str, begin: int = 0, end: int | None = None, max_count: int = 32
    ) -> ReadColumns:
        """``lookup_key`` in the binary read framing (newest first; ``limit_reached`` and
        ``meta["unreachable_nodes"]`` as in the JSON answer)."""
        params = {"begin": begin, "end": end, "max": max_count}
        resp = self._any_node(
            "GET", key_path(topic, key), params=params, headers=COLUMNS_ACCEPT, raw=True
        )
        return columns_from_answer(resp.headers.get("Content-Type"), resp.content)

    def get_message(self, msg_id: str) -> dict[str, Any]:
        return self._any_node("GET", f"/v1/messages/{quote(msg_id, safe='')}")

    # -- consumer groups ------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> dict[str, Any]:
        body = {"topic": topic, "partition": partition, "offset": offset}
        path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
        return self._owner_request(topic, partition, "POST", path, json_body=body)

    def list_groups(self) -> list[str]:
        """Every consumer group with a committed offset somewhere in the cluster."""
        return list(self._any_node("GET", "/v1/consumer-groups")["groups"])

    def committed_offsets(self, group: str, topic: str | None = None) -> dict[str, dict[int, int]]:
        path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
        doc = self._any_node("GET", path, params={"topic": topic})
        return {t: {int(p): o for p, o in parts.items()} for t, parts in doc["offsets"].items()}

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

    # -- admin ----------------------------------------------------------------------------
    def each_node(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """Call every node of the cluster; returns {node_id: answer}."""
        self.refresh_routing()
        assert self.routing.table is not None
        listener = self.routing.listener_in_use()
        return {
            n.id: self.request(method, n.address_for(listener), path, **kw)
            for n in self.routing.table.nodes
        }

    def files(self) -> dict[str, Any]:
        return self.each_node("GET", "/v1/admin/files")

    def compact(self) -> dict[str, Any]:
        return self.each_node("POST", "/v1/admin/compact")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        session = getattr(self._local, "session", None)
        if session is not None:
            session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
