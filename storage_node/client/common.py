"""What the sync and asyncio clients share: errors, routing cache, partitioning, batching.

Transport-free on purpose: the two clients differ only in how they send requests.

Over 400 lines on purpose: the state both clients share (routing cache, partitioner,
batch packing) is one object graph; splitting it would make each client import it back.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from storage_node import errors as errors_module
from storage_node.client.out_message import OutMessage
from storage_node.errors import InvalidArgument, MsgStoreError, NotOwner, Unavailable
from storage_node.formats.partitioning import partition_for_key
from storage_node.wire.batch_codec import CONTENT_TYPE as BATCH_CONTENT_TYPE
from storage_node.wire.batch_codec import encode_batch
from storage_node.wire.message_json import headers_json, value_json
from storage_node.wire.read_answer import MalformedAnswer, ReadColumns, decode_read_answer
from storage_node.wire.routing_table import RoutingTable, parse_routing

RETRY_STATUSES = {500, 502, 503, 504}
_ERROR_CLASSES: dict[str, type[MsgStoreError]] = {
    cls.code: cls
    for cls in vars(errors_module).values()
    if isinstance(cls, type) and issubclass(cls, MsgStoreError)
}


class Unauthenticated(MsgStoreError):
    code = "unauthenticated"
    status = 401


class Forbidden(MsgStoreError):
    code = "forbidden"
    status = 403


_ERROR_CLASSES.update({"unauthenticated": Unauthenticated, "forbidden": Forbidden})


def error_from_response(status: int, body: Any) -> MsgStoreError:
    """Rebuild the server's typed error so callers catch the same classes as in-process."""
    info = body.get("error") if isinstance(body, dict) else None
    if not isinstance(info, dict):
        err = MsgStoreError(f"HTTP {status}: {str(body)[:200]}")
        err.status = status
        return err
    code = str(info.get("code", "internal"))
    message = str(info.get("message", f"HTTP {status}"))
    details = {k: v for k, v in info.items() if k not in ("code", "message")}
    cls = _ERROR_CLASSES.get(code)
    if cls is None:
        err = MsgStoreError(message, **details)
        err.code, err.status = code, status
        return err
    return cls(message, **details)


class TlsError(MsgStoreError):
    """The TLS handshake failed (most often: the node's certificate does not verify against
    the CA given to the client). Not retried: another attempt would fail the same way."""

    code = "tls_error"
    status = 495


CA_ENV = "MSGSTORE_CA"


def resolve_ca(ca: str | None) -> str | None:
    """The CA bundle file a client verifies nodes with: ``ca``, else env MSGSTORE_CA.

    None means "no cluster CA": plain http addresses work, https ones are verified against
    the system's trust store.
    """
    value = ca if ca is not None else os.environ.get(CA_ENV) or None
    if value and not os.path.isfile(value):
        raise InvalidArgument(f"CA file {value} does not exist (option ca / {CA_ENV})")
    if value:
        import ssl

        try:
            ssl.create_default_context(cafile=value)
        except (ssl.SSLError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or str(exc)
            raise InvalidArgument(
                f"CA file {value} holds no PEM certificate ({reason}); give the CA's "
                f"certificate (-----BEGIN CERTIFICATE-----), option ca / {CA_ENV}"
            ) from None
    return value or None


def normalize_endpoints(endpoint: str | Iterable[str], tls: bool = False) -> list[str]:
    """Full base URLs; a bare host:port gets https:// when a CA is configured."""
    endpoints = [endpoint] if isinstance(endpoint, str) else list(endpoint)
    out = []
    scheme = "https" if tls else "http"
    for e in endpoints:
        e = e.strip().rstrip("/")
        if not e:
            continue
        out.append(e if "://" in e else f"{scheme}://{e}")
    if not out:
        raise InvalidArgument("at least one endpoint is needed")
    return out


def check_scheme(address: str, tls: bool) -> None:
    """With a CA configured every node must be reached over https: a plain http address
    (a stale endpoint, a mistyped URL) would send the token in clear."""
    if tls and not address.startswith("https://"):
        raise TlsError(
            f"{address} is not an https address but a CA is configured; refusing to send "
            "requests (and the token) in clear"
        )


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass
class SubBatch:
    """Messages of one produce call that go to one node, with their fixed idempotency id."""

    node_id: str
    address: str
    indices: list[int]
    messages: list[OutMessage]
    sequence: int
    body: bytes = b""
    content_type: str = BATCH_CONTENT_TYPE
    attempts: int = 0
    result: Any = field(default=None, repr=False)
    movable: bool = False  # every message placed freely (no key, no partition asked for)
    maybe_sent: bool = False  # an attempt failed after the body may have reached the node


LISTENERS = ("auto", "internal", "external")
DOWN_FOR_S = 30.0  # how long a node that refused a connection gets no freely placed message


class RoutingCache:
    """The client's copy of the routing table, refreshed on 421 answers.

    ``listener`` picks which node addresses to use: ``internal`` (the cluster's own names),
    ``external`` (each node's ``external_address``, e.g. a Kubernetes NodePort), or ``auto``:
    external when the client was given one of the nodes' external addresses as its endpoint.
    """

    def __init__(self, endpoints: list[str], listener: str = "auto") -> None:
        if listener not in LISTENERS:
            raise InvalidArgument(f"listener must be one of {', '.join(LISTENERS)}")
        self.endpoints = endpoints
        self.listener = listener
        self.table: RoutingTable | None = None
        self._rr = itertools.count()
        self._lock = threading.Lock()
        self._down: dict[str, float] = {}  # address -> when a connection to it was refused

    def update(self, doc: Any) -> RoutingTable:
        table = parse_routing(doc)
        with self._lock:
            if (
                self.table is None
                or table.generation >= self.table.generation
                or (table.managed_by == "standalone")
            ):
                self.table = table
        return self.table

    def listener_in_use(self) -> str:
        if self.listener != "auto":
            return self.listener
        table = self.table
        external = {n.external_address for n in table.nodes} if table else set()
        return "external" if external & set(self.endpoints) else "internal"

    def node_addresses(self) -> list[str]:
        if self.table is None:
            return list(self.endpoints)
        listener = self.listener_in_use()
        return [n.address_for(listener) for n in self.table.nodes] or list(self.endpoints)

    def address_of(self, node_id: str) -> str | None:
        if self.table is None:
            return None
        listener = self.listener_in_use()
        for node in self.table.nodes:
            if node.id == node_id:
                return node.address_for(listener)
        return None

    def owner(self, topic: str, partition: int) -> tuple[str, str] | None:
        if self.table is None:
            return None
        route = self.table.topics.get(topic)
        if route is None or partition >= route.partitions:
            return None
        owner = route.owners[partition]
        address = self.address_of(self.table.leader_of(owner))  # a replicated log's leader
        return (owner, address) if address else None

    def partitions(self, topic: str) -> int | None:
        if self.table is None:
            return None
        route = self.table.topics.get(topic)
        return route.partitions if route else None

    def next_rr(self) -> int:
        return next(self._rr)

    def mark_down(self, address: str) -> None:
        """A node refused a connection: messages free to go anywhere (no key, no partition)
        avoid its partitions for DOWN_FOR_S seconds (then it is tried again)."""
        with self._lock:
            self._down[address] = time.monotonic()

    def live_partitions(self, topic: str) -> list[int]:
        """The topic's partitions whose serving node is not marked down (every partition
        when none is marked, or when all are)."""
        count = self.partitions(topic) or 0
        now = time.monotonic()
        with self._lock:
            down = {a for a, at in self._down.items() if now - at < DOWN_FOR_S}
        if not down:
            return list(range(count))
        live = [p for p in range(count) if (self.owner(topic, p) or ("", ""))[1] not in down]
        return live or list(range(count))


class SequenceSource:
    """Producer id + increasing sequence numbers: one per sub-batch, reused on retry."""

    def __init__(self, producer_id: str | None = None, first: int = 0) -> None:
        self.producer_id = producer_id or f"client-{uuid.uuid4().hex}"
        self._counter = itertools.count(first)
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            return next(self._counter)


def plan_sub_batches(
    routing: RoutingCache,
    sequences: SequenceSource,
    topic: str,
    messages: list[OutMessage],
    indices: list[int],
    fallback_address: str,
) -> list[SubBatch]:
    """Resolve partitions (as the node would) and group messages by owning node. Messages
    free to go anywhere (no key, no partition) take turns over the partitions of nodes not
    marked down, in sub-batches of their own (``movable``: sent elsewhere if their node
    turns out to be down)."""
    partitions = routing.partitions(topic)
    groups: dict[tuple[str, str, bool], list[int]] = {}
    if partitions is None:
        # unknown to our table (new topic or a standalone node): the node decides
        groups[("?", fallback_address, False)] = list(range(len(messages)))
    else:
        start = routing.next_rr()
        live = routing.live_partitions(topic) or list(range(partitions))
        for i, m in enumerate(messages):
            free = m.partition is None and m.key is None
            if m.partition is None:
                if m.key is not None:
                    m.partition = partition_for_key(m.key, partitions)
                else:
                    m.partition = live[(start + i) % len(live)]
            node_id, address = routing.owner(topic, m.partition) or ("?", fallback_address)
            groups.setdefault((node_id, address, free), []).append(i)
    batches = []
    for (node_id, address, free), members in groups.items():
        sub = [messages[i] for i in members]
        batch = SubBatch(node_id, address, [indices[i] for i in members], sub, sequences.next())
        batch.movable = free
        batches.append(batch)
    return batches


def encode_sub_batch(batch: SubBatch, producer_id: str, binary: bool = True) -> None:
    """Fill ``body`` once, so every retry sends identical bytes."""
    ms = batch.messages
    if binary:
        batch.content_type = BATCH_CONTENT_TYPE
        batch.body = encode_batch(
            [m.value for m in ms],
            keys=[m.key for m in ms],
            tags=[m.tag for m in ms],
            msg_ids=[m.msg_id for m in ms],
            timestamps=[m.timestamp for m in ms],
            partitions=[m.partition for m in ms],
            producer_id=producer_id,
            sequence=batch.sequence,
            headers=[m.headers for m in ms] if any(m.headers for m in ms) else None,
        )
        return
    import json

    items = []
    for m in ms:
        item: dict[str, Any] = value_json(m.value)
        for name in ("key", "tag", "msg_id", "timestamp", "partition"):
            v = getattr(m, name)
            if v is not None:
                item[name] = v
        if m.headers:
            item.update(headers_json(m.headers))
        items.append(item)
    batch.content_type = "application/json"
    batch.body = json.dumps(
        {"messages": items, "producer_id": producer_id, "sequence": batch.sequence}
    ).encode()


def results_from_answer(batch: SubBatch, answer: dict[str, Any]) -> list[dict[str, Any]]:
    """Turn either answer shape (JSON rows or binary columns) into result dicts."""
    if "results" in answer:
        return list(answer["results"])
    return [
        {"partition": p, "offset": o, "msg_id": i}
        for p, o, i in zip(answer["partitions"], answer["offsets"], answer["msg_ids"], strict=True)
    ]


def is_retryable(err: BaseException) -> bool:
    if isinstance(err, errors_module.Incomplete):
        return False  # a lookup some nodes could not join: every node would answer the same
    if isinstance(err, Unavailable | errors_module.Fenced):  # Fenced: a replaced leader
        return True
    if isinstance(err, MsgStoreError):
        return err.status in RETRY_STATUSES and err.code != "corrupt_data"
    return False


def redirect_target(err: BaseException, routing: RoutingCache | None = None) -> str | None:
    """Where a 421 says to go: the owner's address on this client's listener when the
    routing table knows the owner (a node names its internal address), else as named."""
    if isinstance(err, NotOwner):
        owner_id = err.details.get("owner_id")
        if routing is not None and isinstance(owner_id, str):
            known = routing.address_of(owner_id)
            if known:
                return known
        owner = err.details.get("owner")
        return str(owner) if owner else None
    return None


# -- reads ---------------------------------------------------------------------------------
# ask for the binary read framing, with the messages' headers
COLUMNS_ACCEPT = {"Accept": f"{BATCH_CONTENT_TYPE}; headers=1"}


def read_path(topic: str, partition: int) -> str:
    return f"/v1/topics/{quote(topic, safe='')}/partitions/{partition}/messages"


def key_path(topic: str, key: str) -> str:
    return f"/v1/topics/{quote(topic, safe='')}/keys/{quote(key, safe='')}"


def read_params(
    offset: int | None,
    max_messages: int,
    max_bytes: int | None,
    tag: str | None,
    start_time: int | None,
    end_time: int | None,
    wait_ms: int | None = None,
) -> dict[str, Any]:
    return {
        "wait_ms": wait_ms,
        "offset": offset,
        "max_messages": max_messages,
        "max_bytes": max_bytes,
        "tag": tag,
        "start_time": start_time,
        "end_time": end_time,
    }


def columns_from_answer(content_type: str | None, body: bytes) -> ReadColumns:
    """Decode a binary read answer; a JSON answer means the node cannot frame reads."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media != BATCH_CONTENT_TYPE:
        raise MalformedAnswer(
            f"asked for {BATCH_CONTENT_TYPE} but the node answered {media or 'no content type'}"
            " (a node without binary reads?)"
        )
    return decode_read_answer(body)
